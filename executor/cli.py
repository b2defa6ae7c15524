"""The command line of an experiment file: flags -> graph -> plan -> dry run or run.

Exit codes: 0 all done; 1 one or more steps failed; 2 usage or config error (nothing ran);
3 --check found changed ids; 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

from executor import flags

from executor.engine import location, outputs
from executor.core.errors import ExecutorError
from executor.core.graph import Graph, build_graph
from executor.engine.lease import LeaseKeeper, LeaseSettings, StalenessWatch
from executor.core.plan import Action, Plan, PlanOptions, plan_steps
from executor.core.record import Owner, RunRecordRef, RUN_SCHEMA, to_json_bytes
from executor.engine.report import ConsoleReporter, plan_json, plan_rows
from executor.engine.snapshot import read_snapshot
from executor.core.step import ExecutorStep, Resources
from executor.engine.store import StoreError, open_store

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CHANGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_PREFIX = "cache"


def _flag(default: Any, help_text: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclass
class ExecutorOptions:
    """Flags every experiment file accepts."""

    prefix: Optional[str] = _flag(None, "where outputs go: a directory, gs://, s3:// or memory:// "
                                        "(default: env EXECUTOR_PREFIX, else cache/)")
    dry_run: bool = _flag(False, "print the plan with a reason per step; write nothing")
    json: bool = _flag(False, "with --dry-run: the plan as JSON")
    only: Optional[str] = _flag(None, "a step name, or a regex over names: run these plus what they need")
    force_failed: bool = _flag(True, "retry steps whose previous attempt failed (false: leave them failed)")
    force_run: Optional[str] = _flag(None, "a step name, or a regex over names: re-run these even when they succeeded (and what consumed their changed outputs)")
    max_concurrent: int = _flag(8, "steps running at once (per runner)")
    ray_address: Optional[str] = _flag(None, "join an existing Ray cluster (auto, ray://host:port; "
                                             "default: env RAY_ADDRESS, else an embedded local cluster)")
    runner: Literal["ray", "inline"] = _flag("ray", "ray | inline (in-process, for debugging)")
    lease_ttl: float = _flag(60.0, "seconds without a heartbeat before another runner may take a step over")
    heartbeat_interval: float = _flag(15.0, "seconds between lease renewals (under half the TTL)")
    check: bool = _flag(False, "CI: compare ids with the committed <experiment>.plan.json; exit 3 on change")
    update_plan: bool = _flag(False, "rewrite <experiment>.plan.json")
    explain: Optional[str] = _flag(None, "show why a step's id differs from its nearest earlier version")
    graph: Optional[str] = _flag(None, "with --dry-run: draw the graph to this file (.html, .svg, .png)")


def _usage(error: str) -> int:
    print(f"error: {error}", file=sys.stderr)
    return EXIT_USAGE


def _main_file() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return str(Path(path).resolve()) if path else None


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
    options = check_options(flags.parse(ExecutorOptions, mine))
    user = None
    if user_class is not None:
        user = flags.parse(user_class, rest, None if isinstance(user_config, type) else user_config)
    return options, user


def check_options(options: ExecutorOptions) -> ExecutorOptions:
    """Values draccus used to coerce silently are refused, naming the flag and the fix (issue 12.9)."""
    if options.prefix is not None and not options.prefix.strip():
        raise ExecutorError("--prefix '': an empty prefix; give a directory, gs://…, s3://… or memory://…")
    if options.max_concurrent < 1:
        raise ExecutorError(f"--max-concurrent {options.max_concurrent}: must be at least 1")
    if options.lease_ttl <= 0 or options.heartbeat_interval <= 0:
        raise ExecutorError("--lease-ttl and --heartbeat-interval must be positive (seconds)")
    lonely = [f for f, on in (("--json", options.json), ("--graph", options.graph)) if on]
    if lonely and not (options.dry_run or (options.json and (options.check or options.explain))):
        raise ExecutorError(f"{' and '.join(lonely)} only apply to a dry run; add --dry-run")
    return options


def resolve_prefix(options: ExecutorOptions, environ: dict[str, str], main_file: str | None = None) -> str:
    """--prefix, else EXECUTOR_PREFIX, else cache/ in the experiment's project (issue 19.4)."""
    from executor.engine.project import default_prefix

    return outputs.normalize_prefix(options.prefix or environ.get("EXECUTOR_PREFIX") or default_prefix(main_file))


def storage_options_from_env(prefix: str, environ: dict[str, str]) -> dict[str, Any]:
    """The fsspec options for an object-store prefix, from EXECUTOR_STORAGE_OPTIONS (JSON)."""
    import json

    raw = environ.get("EXECUTOR_STORAGE_OPTIONS", "").strip()
    if not raw:
        return {}
    try:  # checked whatever the prefix: a malformed value is a mistake worth hearing about
        options = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ExecutorError(f"EXECUTOR_STORAGE_OPTIONS must be a JSON object: {e}") from None
    if not isinstance(options, dict):
        raise ExecutorError(f"EXECUTOR_STORAGE_OPTIONS must be a JSON object, not {type(options).__name__}")
    if outputs.is_local(prefix) or prefix.startswith("memory://"):
        return {}  # a local or memory:// prefix takes no options
    return options


def open_prefix(prefix: str, environ: dict[str, str], options: dict[str, Any]) -> tuple[Any, Any]:
    """The coordination store and the fsspec filesystem for a prefix, with storage options.

    Options for object stores (see storage_options_from_env) come from EXECUTOR_STORAGE_OPTIONS (a
    JSON object passed to gcsfs/s3fs, e.g. {"endpoint_url": "http://127.0.0.1:PORT", "token":
    "anon"}), never from a flag: argv is recorded in run files and options may hold secrets.
    Object stores are wrapped in RetryingStore (transient errors, lost answers of conditional
    writes).

    Test-only: EXECUTOR_FAULTY_STORE="RATE,SEED" wraps the store in FaultyStore (retryable
    errors at that seeded fraction of calls, half of them after the call took effect) under
    RetryingStore, for any prefix. Never set it outside tests.
    """
    from executor.engine.store.faulty import FaultyStore
    from executor.engine.store.retry import RetryingStore

    object_store = not (outputs.is_local(prefix) or prefix.startswith("memory://"))
    store = open_store(prefix, options)
    faulty = environ.get("EXECUTOR_FAULTY_STORE", "").strip()
    if faulty:
        try:
            rate, seed = faulty.split(",")
            store = FaultyStore(store, failure_rate=float(rate), seed=int(seed))
        except ValueError as e:
            raise ExecutorError(f"EXECUTOR_FAULTY_STORE (test-only) must be 'RATE,SEED': {e}") from None
    if object_store or faulty:
        store = RetryingStore(store)
    location.use_storage_options(prefix, options)
    return store, outputs.filesystem(prefix, options)


def _help(user_config: Any) -> None:
    print("Executor flags (`--dry-run`, `--no-dry-run`, `--dry-run=false` and `--dry_run true` all work):")
    for flag, kind, text in flags.field_help(ExecutorOptions):
        print(f"  {flag} {kind:<10} {text}")
    if user_config is not None:
        print("\nExperiment flags:")
        for flag, kind, text in flags.field_help(user_config):
            print(f"  {flag} {kind:<10} {text}")


def executor_main(steps: Sequence[ExecutorStep] | Callable[[Any], Sequence[ExecutorStep]] | None = None,
                  description: str | None = None, *, config: Any = None,
                  argv: Sequence[str] | None = None) -> None:
    """Run an experiment's steps from the command line; exits the process with the exit code.

    `steps` may be a callable taking the experiment's own config (a dataclass whose fields
    become flags, given as `config=`) and returning the steps.
    """
    sys.exit(run(steps, description, config=config, argv=sys.argv[1:] if argv is None else argv))


def run(steps: Any, description: str | None = None, *, config: Any = None, argv: Sequence[str] = (),
        environ: dict[str, str] | None = None, main_file: str | None = None,
        reporter: ConsoleReporter | None = None) -> int:
    environ = dict(os.environ) if environ is None else environ
    main_file = main_file or _main_file()
    reporter = reporter or ConsoleReporter()
    if "--help" in argv or "-h" in argv:
        _help(config)
        return EXIT_OK
    try:
        options, user_config = parse_flags(argv, config)
        step_list = list(steps(user_config) if callable(steps) else steps or [])
        if not step_list:
            raise ExecutorError("no steps given to executor_main")
        graph = build_graph(step_list)
        prefix = resolve_prefix(options, environ, main_file)
        return _run_graph(graph, options, prefix, description, main_file, environ, reporter)
    except ExecutorError as e:
        return _usage(str(e))
    except StoreError as e:
        return _usage(f"storage: {e}")
    except SystemExit as e:  # draccus/argparse report their own usage errors
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    except ValueError as e:  # e.g. a bad step name raised while the experiment builds its steps
        return _usage(str(e))


def _run_graph(graph: Graph, options: ExecutorOptions, prefix: str, description: str | None,
               main_file: str | None, environ: dict[str, str], reporter: ConsoleReporter) -> int:
    if options.check or options.update_plan:
        from executor.tools.plan_file import run_check

        return run_check(graph, main_file, update=options.update_plan, reporter=reporter)
    storage_options = storage_options_from_env(prefix, environ)
    if options.explain:
        from executor.tools.explain import run_explain

        return run_explain(graph, options.explain, prefix, main_file, reporter=reporter,
                           storage_options=storage_options)

    store, fs = open_prefix(prefix, environ, storage_options)  # once per invocation; _execute reuses both
    started = time.time()
    snapshot = read_snapshot(store, graph.nodes.values())
    plan = plan_steps(graph, snapshot, PlanOptions(options.force_failed, options.force_run, options.only, now=time.time()))
    from rich.console import Console

    from executor.tools.drift import warn_drift  # issue 7: completed outputs whose step code changed

    warn_drift(plan, prefix, fs, ConsoleReporter(Console(stderr=True)) if options.json else reporter)
    if options.dry_run:
        if options.json:
            print(plan_json(plan, prefix))
        else:
            from executor.tools.explain import print_dry_run_notes

            reporter.info(f"prefix: {prefix}")
            reporter.print_plan(plan, prefix, title=description)
            print_dry_run_notes(graph, plan, prefix, main_file, reporter, storage_options)
        if options.graph:
            from executor.tools.draw import draw_plan

            draw_plan(plan, options.graph)
            print(f"graph written to {options.graph}", file=sys.stderr if options.json else sys.stdout)
        return EXIT_OK

    reporter.info(f"prefix: {prefix}")
    stopped = plan.by_action(Action.STOP) + plan.by_action(Action.BLOCKED)
    if not plan.needs_runner:
        done = len(plan.by_action(Action.SKIP))
        if stopped:
            reporter.print_plan(plan, prefix, title=description)
            reporter.info(f"[red]{len(stopped)} step(s) failed or blocked[/]: "
                          + ", ".join(d.node.name for d in stopped))
            return EXIT_FAILED
        reporter.info(f"all {done} step(s) already succeeded; nothing to do "
                      f"({time.time() - started:.2f}s)")
        return EXIT_OK
    return _execute(graph, plan, options, prefix, description, main_file, reporter, store, fs)


def _execute(graph: Graph, plan: Plan, options: ExecutorOptions, prefix: str, description: str | None,
             main_file: str | None, reporter: ConsoleReporter, store: Any, fs: Any) -> int:
    from executor.engine.execute import Execution, NodeState, RunContext
    from executor.engine.provenance import invocation

    outputs.check_writable(prefix)
    if prefix.startswith("memory://") and options.runner != "inline":
        raise ExecutorError("memory:// prefixes work with the in-process runner only; add --runner inline")
    reporter.print_plan(plan, prefix, title=description)
    from executor.tools.explain import print_dry_run_notes  # what changed, as a dry run says (issue 19.8)

    print_dry_run_notes(graph, plan, prefix, main_file, reporter, location.storage_options_for(prefix))
    experiment = Path(main_file).stem if main_file else "experiment"
    run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    info = invocation(main_file)
    owner = Owner(run_id=run_id, host=info["host"], pid=info["pid"], user=info["user"])
    settings = LeaseSettings(options.lease_ttl, options.heartbeat_interval)
    if type(reporter) is ConsoleReporter:  # a live view on a terminal; "still running" lines elsewhere
        from executor.engine.live import LiveReporter

        every = float(os.environ.get("EXECUTOR_STILL_RUNNING_EVERY_S") or 30)
        reporter = LiveReporter(console=reporter.console, plan=plan, still_running_every_s=every)
    started_runner: list[Any] = []

    def make_runner():
        if started_runner:
            return started_runner[0]
        if options.runner == "inline":
            from executor.engine.runner.inline import InlineRunner

            started_runner.append(InlineRunner(max_workers=options.max_concurrent))
            return started_runner[0]
        from executor.engine.runner.ray_runner import RayRunner

        address = options.ray_address or os.environ.get("RAY_ADDRESS")
        reporter.info("starting Ray…" if not address else f"joining Ray cluster at {address}…")
        started_runner.append(RayRunner(
            address=address, ship_code=os.environ.get("EXECUTOR_SHIP_CODE", "1") != "0",
            shared_filesystem=os.environ.get("EXECUTOR_SHARED_FILESYSTEM") == "1",
            colocate_hosts=os.environ.get("EXECUTOR_COLOCATE_HOSTS") == "1",
            notify=reporter.warning))
        return started_runner[0]

    # plan-time check against the runner (the cluster's shape; what the in-process runner cannot do),
    # before anything runs
    runnable = [(d.node.name, d.node.step.resources or Resources()) for d in plan.decisions.values()
                if d.action in (Action.RUN, Action.WAIT)]
    try:
        problems = make_runner().check_steps(runnable, prefix_is_local=outputs.is_local(prefix))
    except KeyboardInterrupt:
        if started_runner:
            started_runner[0].shutdown()
        reporter.info("interrupted while starting Ray; nothing ran")
        return EXIT_INTERRUPTED
    except BaseException:
        if started_runner:
            started_runner[0].shutdown()
        raise
    if problems:
        started_runner[0].shutdown()
        where = "the in-process runner" if options.runner == "inline" else "the cluster"
        raise ExecutorError(f"{where} cannot run this plan; nothing was started:\n  " + "\n  ".join(problems))

    ctx = RunContext(prefix=prefix, store=store, fs=fs, owner=owner,
                     keeper=LeaseKeeper(store, settings), watch=StalenessWatch(settings.ttl_s),
                     runner_factory=make_runner, reporter=reporter, invocation=info, main_file=main_file,
                     max_concurrent=options.max_concurrent)
    run_ref = RunRecordRef(experiment, run_id)
    run_file = {"schema": RUN_SCHEMA, "run_id": run_id, "experiment": experiment, "description": description,
                "experiment_file": main_file, "started_at": time.time(), "invocation": info,
                "plan": [{k: r[k] for k in ("name", "step_id", "action", "reason")} for r in plan_rows(plan, prefix)]}
    run_path = outputs.join(prefix, run_ref.key)
    outputs.write_json(fs, run_path, to_json_bytes(run_file))

    try:
        summary = Execution(graph, plan, ctx).run()
    finally:
        if started_runner:
            started_runner[0].shutdown()
        getattr(reporter, "close", lambda: None)()

    failed = summary.failed
    code = EXIT_INTERRUPTED if summary.interrupted else (EXIT_FAILED if failed else EXIT_OK)
    run_file.update(finished_at=time.time(), exit_code=code, ran_here=summary.ran_here,
                    outcome={sid: st.value for sid, st in summary.states.items()}, errors=summary.errors)
    outputs.write_json(fs, run_path, to_json_bytes(run_file))
    getattr(reporter, "print_run_end", lambda *a: None)(plan, summary.states, summary.errors)
    if not sys.stdout.isatty():  # Ray's forwarding of worker output can miss a pipe: the targets' own words
        from executor.engine.report import echo_step_logs

        echo_step_logs(reporter, graph, summary.ran_here, fs, prefix)
    succeeded = sum(st == NodeState.DONE for st in summary.states.values())
    reporter.info(f"{succeeded}/{len(summary.states)} step(s) succeeded, {len(summary.ran_here)} ran here; "
                  f"run record: {run_path}")
    if failed:
        reporter.info("[bold red]failed or blocked:[/] " + ", ".join(
            f"{sid} ({summary.errors.get(sid, '')})" for sid in failed))
    return code
