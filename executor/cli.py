"""The command line of an experiment file: flags -> graph -> the Python API (executor.api) -> exit code.

Exit codes: executor/core/exit_codes.py (0 all done, 1 steps failed, 2 usage or config error, 3
--check found changed ids, 130/141/143 stopped by a signal); `--help` lists them.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Sequence

from executor import api, flags
from executor.core import exit_codes
from executor.core.exit_codes import ExitCode
from executor.engine.run import collector
from executor.engine.prefix import location
from executor.core.errors import ExecutorError
from executor.core.graph import Graph
from executor.core.step import ExecutorStep
from executor.engine.prefix.prefixes import OpenedPrefix, open_given
from executor.engine.events import Events
from executor.tools.console_reporter import ConsoleReporter, Reporter
from executor.tools.console_view import ConsoleView
from executor.engine.store import StoreError


def _flag(default: Any, help_text: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclass
class ExecutorOptions:
    """Flags every experiment file accepts."""

    prefix: Optional[str] = _flag(None, "where outputs go: a directory, gs://, s3:// or memory:// "
                                        "(default: env EXECUTOR_PREFIX, else cache/ in the experiment's project)")
    dry_run: bool = _flag(False, "print the plan with a reason per step; write nothing")
    json: bool = _flag(False, "with --dry-run: the plan as JSON")
    only: Optional[str] = _flag(None, "a step name, or a regex over names: run these plus what they need")
    force_failed: bool = _flag(True, "retry steps whose previous attempt failed (false: leave them failed)")
    force_run: Optional[str] = _flag(None, "a step name, or a regex over names: re-run these even when they succeeded (and what consumed their changed outputs)")
    max_concurrent: int = _flag(8, "steps and copies (cache, mirror) running at once (per runner)")
    ray_address: Optional[str] = _flag(None, "join an existing Ray cluster (auto, ray://host:port; "
                                             "default: env RAY_ADDRESS, else an embedded local cluster)")
    runner: Literal["auto", "ray", "inline"] = _flag("auto", "where steps run: auto: each step in a child process of this one, "
                                                     "Ray started only when a step needs it (resources, map_shards, "
                                                     "a cluster address); ray: every step on Ray; inline: every step "
                                                     "in a child process, Ray never")
    lease_ttl: float = _flag(60.0, "seconds without a heartbeat before another runner may take a step over")
    heartbeat_interval: float = _flag(15.0, "seconds between lease renewals (under half the TTL)")
    cache_from: Optional[str] = _flag(None, "a prefix whose outputs of the same steps are copied (every file "
                                            "checked against its manifest) instead of run; repeat the flag "
                                            "or separate prefixes with commas (default: env EXECUTOR_CACHE_FROM)")
    transfer_budget_gb: float = _flag(10.0, "move at most this many GB in one run: cache copies, mirrored inputs "
                                            "and cross-region reads together; a cache copy over it is not made "
                                            "(the step runs here), anything else over it is refused before "
                                            "anything runs")
    mirror_sources: Optional[str] = _flag(None, "a bucket or prefix that may hold the mirrored(...) inputs, each "
                                                "under its key; repeat the flag or separate them with commas "
                                                "(default: env EXECUTOR_MIRROR_SOURCES)")
    allow_cross_region: bool = _flag(False, "run although the runner's region (env EXECUTOR_REGION, else the "
                                            "cloud's metadata server) is not the location of the prefix's bucket")
    drift: Optional[Literal["warn", "strict"]] = _flag(None, "a completed step whose code changed since its output "
                                                               "was made: warn (reuse it, naming each changed "
                                                               "function) or strict (re-run it); default: the "
                                                               "experiment's executor_main(drift=...), else warn")
    check: bool = _flag(False, "CI: compare ids with the committed ids file <experiment>.plan.json; exit 3 on change")
    update_plan: bool = _flag(False, "rewrite the ids file <experiment>.plan.json")
    explain: Optional[str] = _flag(None, "show why a step's id differs from its nearest earlier version")
    graph: Optional[str] = _flag(None, "with --dry-run: draw the graph to this file (.html, .svg, .png)")


def _usage(error: str, as_json: bool = False) -> int:
    """A usage error: one line on stderr (exit 2); with --json also a JSON object on stdout, so a
    `--dry-run --json` reader always gets JSON."""
    print(f"error: {error}", file=sys.stderr)
    if as_json:
        import json

        print(json.dumps({"error": error, "exit_code": int(ExitCode.USAGE)}, indent=1))
    return ExitCode.USAGE


def _asks_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for --json (in any spelling flags.normalize takes)."""
    words = flags.normalize(list(argv), {"json"})
    return any(words[i] == "--json" and words[i + 1].lower() in ("true", "yes", "1", "on")
               for i in range(len(words) - 1))


def parse_flags(argv: Sequence[str], user_config: Any) -> tuple[ExecutorOptions, Any]:
    user_class = type(user_config) if user_config is not None and not isinstance(user_config, type) else user_config
    clash = flags.top_level_fields(user_class) & flags.top_level_fields(ExecutorOptions)
    if clash:
        raise ExecutorError(f"the experiment's config field(s) {sorted(clash)} shadow executor flags of the "
                            f"same name; rename them in the experiment's config class")
    normalized = flags.normalize(list(argv), flags.bool_fields(ExecutorOptions) | flags.bool_fields(user_class))
    mine, rest = flags.split(normalized, flags.top_level_fields(ExecutorOptions))
    known = {**flags.field_types(ExecutorOptions), **flags.field_types(user_class)}
    for arg in rest[::2]:  # an unknown flag is named with its nearest spelling among all flags
        if not arg.startswith("--") or arg[2:] not in known:
            raise flags.unknown_flag(arg, known)
    options = check_options(flags.parse(ExecutorOptions,
                                        _join_repeated(_join_repeated(mine, "--cache_from"), "--mirror_sources")))
    user = None
    if user_class is not None:
        user = flags.parse(user_class, rest, None if isinstance(user_config, type) else user_config)
    return options, user


def _join_repeated(args: list[str], flag: str) -> list[str]:
    """A flag given several times (`--cache-from A --cache-from B`) as one comma-separated value."""
    values = [args[i + 1] for i in range(0, len(args) - 1, 2) if args[i] == flag]
    if len(values) < 2:
        return args
    rest = [a for i in range(0, len(args) - 1, 2) if args[i] != flag for a in args[i:i + 2]]
    return [*rest, flag, ",".join(values)]


def check_options(options: ExecutorOptions) -> ExecutorOptions:
    """Values draccus used to coerce silently are refused, naming the flag and the fix (issue 12.9)."""
    if options.prefix is not None and not options.prefix.strip():
        raise ExecutorError("--prefix '': an empty prefix; give a directory, gs://…, s3://… or memory://…")
    if options.max_concurrent < 1:
        raise ExecutorError(f"--max-concurrent {options.max_concurrent}: must be at least 1")
    if options.lease_ttl <= 0 or options.heartbeat_interval <= 0:
        raise ExecutorError("--lease-ttl and --heartbeat-interval must be positive (seconds)")
    lonely = [f for f, on in (("--json", options.json), ("--graph", options.graph)) if on]
    if lonely and not options.dry_run:  # --check and --explain print text only: --json there is an error
        raise ExecutorError(f"{' and '.join(lonely)} only apply to a dry run; add --dry-run")
    return options


def _help(user_config: Any) -> None:
    """An experiment's --help, in the shape of `stepgraph COMMAND --help`: one aligned, wrapped column."""
    executor_rows = [*flags.field_help(ExecutorOptions),
                     (location.FLAG, "JSON", f"fsspec options for a gs:// or s3:// prefix (endpoint_url, key, secret, "
                                             f"token, ...; default: env {location.ENV_VAR}); never recorded")]
    user_rows = flags.field_help(user_config) if user_config is not None else []
    width = max(len(_flag_words(flag, kind)) for flag, kind, _ in executor_rows + user_rows) + 2
    print("usage: python EXPERIMENT [FLAGS...]   (or: stepgraph run EXPERIMENT [FLAGS...])\n")
    print("executor flags (a switch is on as --dry-run, off as --no-dry-run or --dry-run=false):")
    _print_rows(executor_rows, width)
    if user_rows:
        print("\nexperiment flags:")
        _print_rows(user_rows, width)
    print("\nexamples:")
    column = max(len(example) for example, _ in _EXAMPLES) + 2
    for example, what in _EXAMPLES:
        print(f"  {example:<{column}}{what}")
    print(f"\nexit codes:\n{exit_codes.help_text()}")


_EXAMPLES = (("python EXPERIMENT --dry-run", "the plan: an action and a reason per step; writes nothing"),
             ("python EXPERIMENT --only STEP", "STEP and what it needs"),
             ("python EXPERIMENT --force-run STEP", "re-run STEP although it succeeded"),
             ("python EXPERIMENT --prefix gs://bucket/runs", "outputs in a bucket"))


def _flag_words(flag: str, kind: str) -> str:
    return flag if kind == "bool" else f"{flag} {kind.upper() if kind == 'json' else kind}"


def _print_rows(rows: Sequence[tuple[str, str, str]], width: int) -> None:
    import shutil
    import textwrap

    columns = max(shutil.get_terminal_size((100, 24)).columns, width + 30)
    for flag, kind, text in rows:
        lines = textwrap.wrap(text, columns - width - 2) or [""]
        print(f"  {_flag_words(flag, kind):<{width}}{lines[0]}")
        for line in lines[1:]:
            print(f"  {'':<{width}}{line}")


# Set while the tools load an experiment file without running it (executor/tools/loading.py): its
# executor_main call hands the steps to this loader instead. A contextvar: each load, on any thread,
# sees only its own.
LOADER: contextvars.ContextVar[Callable[..., None] | None] = contextvars.ContextVar("stepgraph_loader",
                                                                                    default=None)


def executor_main(steps: Sequence[ExecutorStep] | Callable[[Any], Sequence[ExecutorStep]] | None = None,
                  description: str | None = None, *, config: Any = None,
                  argv: Sequence[str] | None = None, drift: str | None = None) -> None:
    """Run an experiment's steps from the command line; exits the process with the exit code.

    `steps` may be a callable taking the experiment's own config (a dataclass whose fields
    become flags, given as `config=`) and returning the steps. `drift`: the experiment's policy for
    completed steps whose code changed ("warn", the default, or "strict"); `--drift` overrides it.
    """
    loader = LOADER.get()
    if loader is not None:  # the tools are loading this file (executor/tools/loading.py)
        return loader(steps, description, config=config, argv=argv)
    from executor.engine.run import signals

    signals.own_process()  # SIGINT/SIGTERM end this process's runs cleanly and promptly
    try:
        code = run(steps, description, config=config, argv=sys.argv[1:] if argv is None else argv,
                   owns_process=True, drift=drift)
        sys.stdout.flush()
    except BrokenPipeError:  # `python foo.py --dry-run | head`: the reader left; no traceback (issue 19.10)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = ExitCode.BROKEN_PIPE
    if code in (ExitCode.INTERRUPTED, ExitCode.TERMINATED):
        # Everything is released and recorded; skip interpreter teardown, where Ray's exit hooks
        # can hang a driver whose tasks were just cancelled (issue 12): a signal ends the process now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    collector.freeze_for_exit()
    sys.exit(code)


def run(steps: Any, description: str | None = None, *, config: Any = None, argv: Sequence[str] = (),
        environ: dict[str, str] | None = None, main_file: str | None = None,
        reporter: Reporter | None = None, owns_process: bool = False, drift: str | None = None) -> int:
    """The command line on `steps`; returns the exit code. `owns_process`: the process ends with
    this call (executor_main), which lets planning pause the garbage collector (engine/run/collector.py).
    `reporter`: where the console view's lines go; without one, the command line's own, which
    becomes the live view once steps run."""
    environ = dict(os.environ) if environ is None else environ
    main_file = main_file or api.main_file_path()
    if "--help" in argv or "-h" in argv:
        _help(config)
        return ExitCode.OK
    # from here (or from the start of `stepgraph run FILE`) to the first step, the steps' declaration included
    pause = collector.PlanningPause().carried_on() if owns_process else None
    try:
        return _run_argv(steps, description, config, argv, environ, main_file, reporter, pause, drift)
    finally:
        if pause is not None and pause is not collector.LOADING.get():  # `stepgraph run FILE` ends its own
            pause.release()  # no step ran (a dry run, an error): the collector back on, nothing frozen


def _run_argv(steps: Any, description: str | None, config: Any, argv: Sequence[str], environ: dict[str, str],
              main_file: str, reporter: Reporter | None, pause: collector.PlanningPause | None,
              drift: str | None) -> int:
    view = ConsoleView(reporter or ConsoleReporter(), main_file=main_file, live=reporter is None,
                       on_steps=pause.resume if pause is not None else lambda: None,
                       still_running_every_s=float(environ.get("EXECUTOR_STILL_RUNNING_EVERY_S") or 30))
    try:
        storage_flag, argv = location.pop_storage_options_flag(list(argv))  # JSON: kept from draccus
        options, user_config = parse_flags(argv, config)
        options = dataclasses.replace(options, drift=options.drift or _drift_policy(drift))
        step_list = list(steps(user_config) if callable(steps) else steps or [])
        if not step_list:
            raise ExecutorError("no steps given to executor_main")
        if options.check or options.update_plan:  # ids only: the prefix is opened only if a config reads a tag
            return _check(step_list, options, storage_flag, main_file, environ, view)
        # the prefix and its storage options, resolved and opened once; this one value goes down from here
        opened = open_given(options.prefix, environ, main_file, flag=storage_flag)
        graph = api.graph_of(step_list, api_options(options, opened), environ)
        from executor.engine.run.provenance import secret_flag_names

        return _run_graph(graph, options, opened, description, main_file, environ, view, secret_flag_names(config))
    except ExecutorError as e:
        return _usage(str(e), _asks_json(argv))
    except StoreError as e:
        return _usage(f"storage: {e}", _asks_json(argv))
    except SystemExit as e:  # draccus/argparse report their own usage errors
        return ExitCode.USAGE if e.code not in (0, None) else ExitCode.OK
    except ValueError as e:  # e.g. a step function that is a lambda, raised while the experiment builds its steps
        return _usage(str(e), _asks_json(argv))


def _drift_policy(drift: str | None) -> str:
    if drift not in (None, *api.DRIFT_POLICIES):
        raise ExecutorError(f"executor_main(drift={drift!r}): the drift policy is one of "
                            f"{', '.join(api.DRIFT_POLICIES)}")
    return drift or "warn"


def api_options(flags_: ExecutorOptions, opened: OpenedPrefix | None = None) -> api.Options:
    """The API's options from the flags of the same names; the prefix is `opened` (the prefix and its
    storage options, resolved and opened once by the command line) when given, else the flag as given."""
    names = {f.name for f in dataclasses.fields(api.Options)} & {f.name for f in dataclasses.fields(flags_)}

    def listed(value: str | None) -> tuple[str, ...]:  # a repeated flag: joined by parse_flags
        return tuple(p for p in (value or "").split(",") if p.strip())

    return api.Options(**{n: getattr(flags_, n) for n in names - {"prefix", "storage_options", "cache_from",
                                                                   "mirror_sources", "drift"}},
                       prefix=opened if opened is not None else flags_.prefix, cache_from=listed(flags_.cache_from),
                       mirror_sources=listed(flags_.mirror_sources), drift=flags_.drift or "warn")


def _check(steps: list[ExecutorStep], options: ExecutorOptions, storage_flag: str | None, main_file: str | None,
           environ: dict[str, str], view: ConsoleView) -> int:
    """--check / --update-plan: the ids against the committed ids file, reported as events to `view`. A
    config reading a tag opens the prefix (once, through the API); nothing else reads it."""
    from executor.tools.plan_file import run_check

    storage = location.parse_storage_options(storage_flag, location.FLAG) if storage_flag is not None else None
    graph = api.graph_of(steps, dataclasses.replace(api_options(options), storage_options=storage), environ)
    return run_check(graph, main_file, update=options.update_plan, events=Events([view]))


def _run_graph(graph: Graph, options: ExecutorOptions, opened: OpenedPrefix, description: str | None,
               main_file: str | None, environ: dict[str, str], view: ConsoleView,
               secret_flags: frozenset[str] = frozenset()) -> int:
    """A run, or the dry run or --explain, on the prefix opened once: each reports through events to `view`."""
    run_options = api_options(options, opened)
    if options.explain:
        from executor.tools.explain import cache_from_plan, run_explain

        plan, sources = cache_from_plan(graph, run_options, environ)
        return run_explain(graph, options.explain, opened, main_file, events=Events([view]), plan=plan,
                           cache_from=sources)
    if options.dry_run:
        return _dry_run(graph, options, run_options, description, main_file, environ, view)
    return api.run_graph(graph, run_options, description=description, environ=environ,
                         subscribers=[view], main_file=main_file, secret_flags=secret_flags).exit_code


def _dry_run(graph: Graph, options: ExecutorOptions, run_options: api.Options, description: str | None,
             main_file: str | None, environ: dict[str, str], view: ConsoleView) -> int:
    """The plan, reported as events to `view` (tools/dry_run.py); with --json, the plan as JSON on
    stdout (its drift warnings on stderr)."""
    if options.json:  # drift warnings (issue 7) on stderr; each row with its shard forecast (issue 48)
        from executor.tools.dry_run import dry_run_json

        planned = dry_run_json(graph, run_options, sys.stdout, environ=environ,
                               subscribers=[ConsoleView(ConsoleReporter(stderr=True))])
    else:
        from executor.tools.dry_run import dry_run

        planned = dry_run(graph, run_options, subscribers=[view], environ=environ, main_file=main_file,
                          description=description)
    if options.graph:
        from executor.tools.draw import draw_plan

        draw_plan(planned.plan, options.graph)
        print(f"graph written to {options.graph}", file=sys.stderr if options.json else sys.stdout)
    return ExitCode.OK
