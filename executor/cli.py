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
from typing import Any, Callable, Optional, Sequence

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
from executor.engine.store import StoreError

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
    only: Optional[str] = _flag(None, "regex over step names: run these plus what they need")
    force_failed: bool = _flag(True, "retry steps whose previous attempt failed (false: leave them failed)")
    force_run: Optional[str] = _flag(None, "regex: re-run matching steps even when they succeeded")
    max_concurrent: int = _flag(8, "steps running at once (per runner)")
    ray_address: Optional[str] = _flag(None, "join an existing Ray cluster (auto, ray://host:port; "
                                             "default: env RAY_ADDRESS, else an embedded local cluster)")
    runner: str = _flag("ray", "ray | inline (in-process, for debugging)")
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
    if rest and user_class is None:
        unknown = [a for a in rest if a.startswith("--")] or rest
        raise ExecutorError(f"unknown argument(s) {' '.join(unknown)}; run with --help for the flags")
    options = flags.parse(ExecutorOptions, mine)
    user = None
    if user_class is not None:
        user = flags.parse(user_class, rest, None if isinstance(user_config, type) else user_config)
    return options, user


def resolve_prefix(options: ExecutorOptions, environ: dict[str, str]) -> str:
    return outputs.normalize_prefix(options.prefix or environ.get("EXECUTOR_PREFIX") or DEFAULT_PREFIX)


def storage_options_for_prefix(prefix: str, flag_value: str | None, environ: dict[str, str]) -> dict[str, Any]:
    """The fsspec options for an object-store prefix: `--storage-options JSON`, else the variable
    EXECUTOR_STORAGE_OPTIONS. Malformed is an error whatever the prefix; local and memory:// take none."""
    options = location.storage_options_from(flag_value, environ)
    return {} if outputs.is_local(prefix) or prefix.startswith("memory://") else options


def _help(user_config: Any) -> None:
    import draccus

    print("Executor flags (both `--dry-run` and `--dry_run true` spellings work):")
    for f in dataclasses.fields(ExecutorOptions):
        default = "" if f.default is None else f" [default: {f.default}]"
        print(f"  --{f.name.replace('_', '-'):<20} {f.metadata['help']}{default}")
    print(f"  {location.FLAG:<22} JSON fsspec options for a gs:// or s3:// prefix (endpoint_url, key, secret, "
          f"token, ...; default: env {location.ENV_VAR}); never recorded")
    if user_config is not None:
        print("\nExperiment flags:")
        cls = user_config if isinstance(user_config, type) else type(user_config)
        try:
            draccus.parse(config_class=cls, args=["--help"])
        except SystemExit:
            pass


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
        storage_flag, argv = location.pop_storage_options_flag(list(argv))
        options, user_config = parse_flags(argv, config)
        step_list = list(steps(user_config) if callable(steps) else steps or [])
        if not step_list:
            raise ExecutorError("no steps given to executor_main")
        graph = build_graph(step_list)
        prefix = resolve_prefix(options, environ)
        storage_options = storage_options_for_prefix(prefix, storage_flag, environ)
        return _run_graph(graph, options, prefix, description, main_file, environ, reporter, storage_options)
    except ExecutorError as e:
        return _usage(str(e))
    except StoreError as e:
        return _usage(f"storage: {e}")
    except SystemExit as e:  # draccus/argparse report their own usage errors
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    except ValueError as e:  # e.g. a bad step name raised while the experiment builds its steps
        return _usage(str(e))


def _run_graph(graph: Graph, options: ExecutorOptions, prefix: str, description: str | None,
               main_file: str | None, environ: dict[str, str], reporter: ConsoleReporter,
               storage_options: dict[str, Any]) -> int:
    if options.check or options.update_plan:
        from executor.tools.plan_file import run_check

        return run_check(graph, main_file, update=options.update_plan, reporter=reporter)
    if options.explain:
        from executor.tools.explain import run_explain

        return run_explain(graph, options.explain, prefix, main_file, reporter=reporter,
                           storage_options=storage_options)

    store, fs = location.open_location(prefix, storage_options, environ=environ)  # once; _execute reuses both
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
    experiment = Path(main_file).stem if main_file else "experiment"
    run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    info = invocation(main_file)
    owner = Owner(run_id=run_id, host=info["host"], pid=info["pid"], user=info["user"])
    settings = LeaseSettings(options.lease_ttl, options.heartbeat_interval)
    if sys.stdout.isatty() and type(reporter) is ConsoleReporter:  # issue 4: live view on a terminal
        from executor.engine.live import LiveReporter

        reporter = LiveReporter(console=reporter.console, plan=plan)
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
    succeeded = sum(st == NodeState.DONE for st in summary.states.values())
    reporter.info(f"{succeeded}/{len(summary.states)} step(s) succeeded, {len(summary.ran_here)} ran here; "
                  f"run record: {run_path}")
    if failed:
        reporter.info("[bold red]failed or blocked:[/] " + ", ".join(
            f"{sid} ({summary.errors.get(sid, '')})" for sid in failed))
    return code
