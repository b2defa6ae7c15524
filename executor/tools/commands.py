"""The handlers behind `stepgraph <command>`: each takes parsed arguments, returns an exit code.

Argument parsing lives in executor/__main__.py; the work lives in the modules named per command
(plan_file and plan_check: the ids file and `check`; adopt, verify, gc, overview). What is here is
presentation: reading a status, printing tables, turning errors into exit codes (0 ok, 1 problems
found, 2 usage, 3 changes).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from executor.core.exit_codes import ExitCode
from executor.core.errors import ExecutorError, StatusError
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.prefix.prefixes import OpenedPrefix, check_outputs, open_outputs, open_prefix, resolve_prefix
from executor.engine.worker.progress import human_bytes
from executor.core.record import Absent, State, status_key
from executor.engine.store import StoreError


LOADING_COMMANDS = {"ids", "explain", "graph", "adopt", "accept-drift", "gc"}  # and `status EXPERIMENT.py`


def default_prefix(prefix: str | None, experiment: str | None = None) -> str:
    """--prefix, else EXECUTOR_PREFIX, else cache/ in the project holding the experiment (or the
    working directory), as a run of that experiment would choose: executor.engine.prefix.prefixes decides
    (a mis-spelled `gs:/bucket` is refused there, with the right spelling)."""
    return resolve_prefix(prefix, os.environ, experiment)


def opened_prefix(args: Any, experiment: str | None = None) -> OpenedPrefix:
    """The prefix a command reads (default_prefix), opened once with --storage-options (else
    EXECUTOR_STORAGE_OPTIONS): the one value the command hands every tool it calls."""
    return open_prefix(default_prefix(args.prefix, experiment), args.storage_options)


def _resolved(experiment: str) -> str:
    """An experiment file's absolute path, as loading names it (its project picks the default prefix)."""
    from pathlib import Path

    return str(Path(experiment).resolve())


def loads_experiment(args: Any) -> bool:
    return args.command in LOADING_COMMANDS or (args.command == "status" and _is_experiment(args.target))


def _is_experiment(target: str | None) -> bool:
    return bool(target) and target.endswith(".py")


def require_outputs(args: Any) -> OpenedPrefix:
    """The prefix a read-only command reads, opened; a missing prefix, or one with no step output and
    no run file, is most likely mistyped: one answer for every command (exit 2)."""
    return open_outputs(args.prefix, args.storage_options, os.environ)


def _ago(then: float | None, now: float) -> str:
    if not then:
        return "?"
    seconds = max(0.0, now - then)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _when(then: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(then)) if then else "?"


def _step_path(args: Any, ref: str) -> tuple[str, OpenedPrefix]:
    """A step's output directory from its name, step id or path (see executor/tools/step_ref.py),
    and the prefix it is under, opened: the folder holding it when `ref` is a path or URL (the
    default prefix is then neither resolved nor opened), else the command's prefix."""
    from executor.tools.step_ref import given_path, step_path

    path = given_path(ref)
    if path is not None:
        return path, open_prefix(path.rsplit("/", 1)[0] or "/", args.storage_options)
    opened = opened_prefix(args)
    return step_path(opened, ref), opened


# -- run, explain, graph ----------------------------------------------------------------------------

def cmd_run(args: Any) -> int:
    """`python EXPERIMENT FLAGS...`, in this process: the experiment's own executor_main exits."""
    import runpy
    from pathlib import Path

    from executor.engine.run import collector

    file = Path(args.experiment)
    if not file.is_file():
        raise ExecutorError(f"experiment file {args.experiment} does not exist")
    flags = list(args.flags[1:] if args.flags[:1] == ["--"] else args.flags)
    if args.prefix:
        flags += ["--prefix", args.prefix]
    saved = (list(sys.argv), list(sys.path))
    sys.argv = [str(file), *flags]
    sys.path.insert(0, str(file.resolve().parent))
    # This command owns the process: the collector is paused while the file declares its steps; the file's
    # executor_main carries the pause on and resumes it before any step runs (executor/engine/run/collector.py).
    pause = collector.PlanningPause()
    pause.pause()
    token = collector.LOADING.set(pause)
    try:
        runpy.run_path(str(file), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (ExitCode.OK if e.code is None else ExitCode.USAGE)
    finally:
        collector.LOADING.reset(token)
        pause.resume()  # if no step ran (a dry run, an error): the collector as it was, what was built frozen
        sys.argv[:], sys.path[:] = saved
    raise ExecutorError(f"{file} never called executor_main(...)")


def _load(args: Any, path: str | None = None, opened: OpenedPrefix | None = None):
    """The experiment's graph; a command with --prefix resolves output_of_tag(...) from that prefix's
    tags (from `opened` when the command opened it already, else opened on the first tag read)."""
    from executor.tools.loading import load_experiment

    path = path or args.experiment
    tags = None
    if hasattr(args, "prefix"):  # ids and check read no prefix
        from executor.tools.tags import tag_lookup

        tags = tag_lookup(lambda: (opened or opened_prefix(args, path)).store)
    return load_experiment(path, args.experiment_args, tags)


def _run_options(args: Any, opened: OpenedPrefix) -> Any:
    """The options of a plain run of the loaded experiment at the prefix the command opened (its storage
    options with it), with --cache-from (else EXECUTOR_CACHE_FROM, read where the plan is made), as the
    planning commands show its plan."""
    from executor import api

    return api.Options(prefix=opened,
                       cache_from=tuple(p for given in args.cache_from for p in given.split(",") if p.strip()))


def cmd_explain(args: Any) -> int:
    from executor.engine.events import Events
    from executor.tools.console_reporter import ConsoleReporter
    from executor.tools.console_view import ConsoleView
    from executor.tools.explain import cache_from_plan, run_explain

    opened = opened_prefix(args, _resolved(args.experiment))  # once: the load's tags, the plan, earlier versions
    loaded = _load(args, opened=opened)
    plan, sources = cache_from_plan(loaded.graph, _run_options(args, opened), os.environ)
    return run_explain(loaded.graph, args.step, opened, loaded.path, events=Events([ConsoleView(ConsoleReporter())]),
                       plan=plan, cache_from=sources)


def cmd_graph(args: Any) -> int:
    from executor import api
    from executor.tools.draw import draw_plan

    opened = opened_prefix(args, _resolved(args.experiment))  # once: the load's tags and the plan
    loaded = _load(args, opened=opened)
    plan = api.decide(loaded.graph, _run_options(args, opened), environ=os.environ).plan
    print(f"graph of {len(plan.decisions)} step(s) against {opened.url} written to {draw_plan(plan, args.file)}")
    return ExitCode.OK


# -- ids, check -----------------------------------------------------------------------------------

def cmd_ids(args: Any) -> int:
    """The ids file's content (every step's id and identity document), recomputed, on stdout."""
    from executor.tools.plan_file import dumps, plan_document

    loaded = _load(args)
    print(dumps(plan_document(loaded.graph, loaded.stem)), end="")
    return ExitCode.OK


def cmd_check(args: Any) -> int:
    from executor.tools.console_reporter import ConsoleReporter
    from executor.tools.console_view import ConsoleView
    from executor.tools.plan_check import check_experiments

    return check_experiments(args.paths, subscribers=[ConsoleView(ConsoleReporter())]).exit_code


# -- adopt --------------------------------------------------------------------------------------

def cmd_adopt(args: Any) -> int:
    from executor.engine.run.provenance import git_state, user_and_host
    from executor.tools.adopt import adopt_chain

    opened = opened_prefix(args, _resolved(args.experiment))  # opened once: the load's tags and each adoption
    loaded = _load(args, opened=opened)
    prefix = opened.url
    declared_by = {**user_and_host(), "git": git_state(os.path.dirname(loaded.path)), "command": "adopt"}
    adoptions, notes = adopt_chain(loaded.graph, args.name, args.from_, opened, reason=args.reason,
                                   declared_by=declared_by, force=args.force,
                                   dry_run=args.dry_run) if args.with_dependents else (
        [_adopt_one(loaded.graph, args, opened, declared_by)], [])
    verb = "would adopt" if args.dry_run else "adopted"
    for result in adoptions:
        print(f"{verb}: {result.node.step_id} is now an alias of {result.alias_of['step_id']} "
              f"({prefix}/{result.alias_of['output_rel']})")
        if result.differences:
            print("  identity differences the adoption declares irrelevant:")
            for line in result.differences:
                print(f"    {line}")
    for note in notes:
        print(f"  {note}")
    if args.dry_run:
        print("dry run: nothing written")
        return ExitCode.OK
    waiting = [n.name for n in loaded.graph.nodes.values()
               if any(d in {a.node.digest for a in adoptions} for d in n.deps)
               and n.digest not in {a.node.digest for a in adoptions}]
    print(f"record: {adoptions[0].record_path}. A re-run skips the adopted step(s)"
          + (f"; {', '.join(waiting)} get new ids and will run (add --with-dependents to adopt their earlier "
             f"outputs too)" if waiting and not args.with_dependents else ""))
    return ExitCode.OK


def _adopt_one(graph: Any, args: Any, opened: OpenedPrefix, declared_by: dict) -> Any:
    from executor.tools.adopt import adopt

    return adopt(graph, args.name, args.from_, opened, reason=args.reason, declared_by=declared_by,
                 force=args.force, dry_run=args.dry_run)


def cmd_accept_drift(args: Any) -> int:
    from executor.engine.run.provenance import git_state, user_and_host
    from executor.tools.accept_drift import accept_drift

    opened = opened_prefix(args, _resolved(args.experiment))
    loaded = _load(args, opened=opened)
    accepted_by = {**user_and_host(), "git": git_state(os.path.dirname(loaded.path)), "command": "accept-drift"}
    accepted = accept_drift(loaded.graph, args.name, opened, reason=args.reason, accepted_by=accepted_by)
    print(f"accepted: {accepted.name}: {accepted.changed} does not change its output ({args.reason})")
    print(f"record: {accepted.path}. The drift warning stops for this code; a later edit warns again")
    return ExitCode.OK


# -- verify ---------------------------------------------------------------------------------------

def cmd_verify(args: Any) -> int:
    from executor.tools.verify import verify_path

    if args.path:
        path, opened = _step_path(args, args.path)
    else:
        opened = require_outputs(args)
        path = opened.url
    results = verify_path(opened, path)
    if not results:
        from executor.engine.prefix.prefixes import WHERE_FROM

        raise ExecutorError(f"no step outputs under {path}: only run files; is the prefix right? ({WHERE_FROM})")
    problems = 0
    verified = 0
    for r in results:
        label = r.step_id or r.path
        if r.problems:
            problems += len(r.problems)
            print(f"✘ {label}: {len(r.problems)} problem(s) in {r.path}")
            for p in r.problems:
                print(f"    {p.render()}")
        elif r.verified:
            verified += 1
            note = f" ({r.note})" if r.note else ""
            print(f"✔ {label}: {r.files} file(s) match the manifest{note}")
        elif args.verbose or len(results) == 1:
            print(f"- {label}: {r.note}")
    print(f"{verified} step(s) verified, {problems} problem(s)")
    from executor.tools.names_commands import print_taints

    at_prefix = opened if opened.url == default_prefix(args.prefix) else opened_prefix(args)  # a path elsewhere
    print_taints(at_prefix.view, {r.step_id for r in results if r.step_id})
    return ExitCode.FAILED if problems else ExitCode.OK


# -- gc -------------------------------------------------------------------------------------------

def cmd_gc(args: Any) -> int:
    from executor.tools.gc import collect, experiment_outputs, sweep

    opened = opened_prefix(args, _resolved(args.experiments[0]))  # opened and probed once, for every part of gc
    loaded = [_load(args, path, opened) for path in args.experiments]  # with the flags after --, as they ran
    check_outputs(opened)
    prefix = opened.url
    roots: dict[str, str] = {}
    for experiment in loaded:
        for rel, why in experiment_outputs(experiment.path, experiment.graph).items():
            roots.setdefault(rel, why)
    report = collect(opened, roots, args.pin,
                     say=lambda message: print(f"gc: {message}", file=sys.stderr, flush=True))
    print(f"prefix {prefix}: {len(report.kept_present)} output(s) reachable from "
          f"{len(args.experiments)} experiment(s) and {len(args.pin)} pin(s); "
          f"{len(report.garbage)} unreachable, {human_bytes(report.garbage_bytes)}")
    if report.claims or report.claims_kept:  # issue 48: claims on shard results (executor/tools/gc.py)
        print(f"shard claims: {report.claims_kept} held by reachable outputs, {len(report.claims)} not")
    now = time.time()
    commands_by_run = _run_commands(opened.view) if report.garbage else {}
    for o in report.garbage:
        run_id = o.row.run_id if o.row else None
        print(f"    {human_bytes(o.size):>10}  {o.state.value:<9}  {_ago(o.last_written, now):>12}  {o.rel}")
        if run_id in commands_by_run:
            print(f"{'':>16}written by: {commands_by_run[run_id]}")
    if not args.delete:
        if report.garbage:
            print(f"nothing deleted; add --delete (outputs older than --grace-hours {args.grace_hours:g}) to delete. "
                  f"Outputs of runs with other flags are kept only when those flags follow --")
        return ExitCode.OK
    sweep(report, opened, grace_hours=args.grace_hours, now=now)
    for rel in report.deleted:
        print(f"deleted {rel}")
    for rel, why in report.spared.items():
        print(f"kept {rel}: {why}")
    for rel, error in report.failed.items():
        print(f"could not delete {rel}: {error}")
    refused = f"; could not delete {len(report.failed)} (the storage refused; see above)" if report.failed else ""
    print(f"deleted {len(report.deleted)} output(s); kept {len(report.spared)} unreachable one(s){refused}")
    if report.claims:
        print(f"deleted {len(report.deleted_claims)} shard claim(s); kept {len(report.spared_claims)}")
    if report.deleted_markers:  # executor/tools/gc.py: markers of deleted or re-written statuses
        print(f"deleted {report.deleted_markers} lineage marker(s) of outputs no longer there as marked")
    return ExitCode.FAILED if report.failed else ExitCode.OK


def _run_commands(view: PrefixView) -> dict[str, str]:
    """run id -> its command line, so gc shows which flags made an unreachable output."""
    from executor.tools.overview import command_text

    return {r.run_id: command_text(r) for r in view.runs() if r.run_id}


# -- status, ps, repair ---------------------------------------------------------------------------

def cmd_status(args: Any) -> int:
    """No target: every step under the prefix; an experiment: each of its steps; a step: its detail."""
    from executor.tools import overview

    if args.target and not _is_experiment(args.target):
        return _step_status(*_step_path(args, args.target), args)
    if args.target:
        opened = opened_prefix(args, _resolved(args.target))
        loaded = _load(args, args.target, opened)
        names = {n.output_rel: n.name for n in loaded.graph.nodes.values()}
        rows = opened.view.steps(names, names=names, timings=True)
    else:
        opened = require_outputs(args)
        rows = opened.view.steps(timings=True)
    prefix = opened.url
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=1, default=str))
    else:
        print(f"prefix {prefix}")
        overview.print_step_table(rows)
        overview.print_mirror_copies(opened.view.mirror_copies())
    return ExitCode.FAILED if any(r.is_problem for r in rows) else ExitCode.OK


def cmd_runs(args: Any) -> int:
    from executor.tools import overview

    opened = require_outputs(args)
    prefix, rows = opened.url, opened.view.runs(limit=max(0, args.limit))
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=1, default=str))
    elif not rows:
        print(f"no runs recorded under {prefix}/runs")
    else:
        print(f"prefix {prefix}: newest first")
        overview.print_run_table(rows)
    return ExitCode.OK


def cmd_completion(args: Any) -> int:
    from executor.tools.completion import script

    print(script(args.shell, args.build_parser()))
    return ExitCode.OK


def _step_status(path: str, opened: OpenedPrefix, args: Any) -> int:
    view, rel = opened.locate(path)
    detail = view.step_at(rel, rows=(), runs=())
    row, status = detail.row, detail.status
    if status is None and row.state is not Absent.NO_STATUS:
        raise StatusError(f"{row.status_path}: {row.problem}. If no runner is using it, delete it "
                          f"(`stepgraph repair --delete-status {path}`) and the step re-runs.")
    code = (ExitCode.FAILED if row.state is Absent.NO_STATUS else
            ExitCode.USAGE if detail.record_problem else ExitCode.OK)
    if args.json:  # the row `status --json` lists, with the status and record in full
        print(json.dumps({**row.to_json(), "status": json.loads(status.to_bytes()) if status else None,
                          "record": detail.record, "record_problem": detail.record_problem}, indent=1, default=str))
        return code
    if row.state is Absent.NO_STATUS:
        print(f"{path}: no status (never started here, or deleted by repair)")
        return code
    _print_status(status, time.time())
    if detail.record_problem:
        print(f"  record      unreadable: {detail.record_problem}")
    elif detail.record is None:
        print("  record      none")
    else:
        _print_record(detail.record)
    return code


def _print_status(status: Any, now: float) -> None:
    print(f"{status.step_id}  {status.state.value}  attempt {status.attempt}  seq {status.seq}")
    print(f"  digest      {status.digest}")
    owner = status.owner
    who = f" by {owner.user}@{owner.host} pid {owner.pid}, run {owner.run_id}" if owner else ""
    print(f"  written     {_when(status.written_at)} ({_ago(status.written_at, now)}, writer's clock){who}")
    if status.started_at:
        print(f"  started     {_when(status.started_at)}")
    if status.alias_of:
        print(f"  alias of    {status.alias_of.get('step_id')} ({status.alias_of.get('output_rel')}), declared by "
              f"{status.alias_of.get('declared_by', '?')}: {status.alias_of.get('reason') or '(no reason given)'}")
    if status.content_sha256:
        print(f"  content     sha256 {status.content_sha256[:16]}… (of its manifest; dependents compare it)")
    if status.error:
        print(f"  error       {status.error}")
    if status.traceback_tail:
        print("  traceback (tail):\n    " + status.traceback_tail.rstrip()[-1500:].replace("\n", "\n    "))


def _print_record(record: Any) -> None:
    provenance = record.get("provenance") or {}
    git = provenance.get("git") or {}
    manifest = record.get("manifest") or []
    timings = record.get("timings") or {}
    print("record:")
    if provenance.get("function"):
        fingerprint = str(provenance.get("function_sha256"))[:12]
        print(f"  function    {provenance['function']} (source sha256 {fingerprint}…)")
    if git.get("commit"):
        print(f"  git         {git['commit'][:12]}{' (dirty)' if git.get('dirty') else ''}")
    print(f"  finished    {_when(timings.get('finished_at'))}, took {float(timings.get('seconds') or 0):.1f}s")
    print(f"  outputs     {len(manifest)} file(s), {human_bytes(sum(int(e.get('size') or 0) for e in manifest))}")
    copied = (record.get("extra") or {}).get("copied_from")
    if copied:  # --cache-from: made elsewhere, copied here and checked against its manifest
        print(f"  copied from {copied.get('prefix')} (run {copied.get('run_id')}, "
              f"{human_bytes(int(copied.get('bytes') or 0))} in {float(copied.get('seconds') or 0):.1f}s)")
    for dep in record.get("dependencies") or []:
        consumed = f" (consumed content {dep['content_sha256'][:16]}…)" if dep.get("content_sha256") else ""
        print(f"  depends on  {dep.get('step_id')} -> {dep.get('path')}{consumed}")
    if record.get("result") is not None:
        print(f"  result      {json.dumps(record['result'], default=str)[:300]}")


def cmd_ps(args: Any) -> int:
    opened = require_outputs(args)
    prefix, view = opened.url, opened.view
    rows = view.steps()  # one listing, one read_many
    for row in rows:
        if row.state is Absent.CORRUPT:
            print(f"warning: {row.status_path}: {row.problem}")
    leases = view.leases(rows)
    if not leases:
        print(f"no RUNNING leases under {prefix}")
        return ExitCode.OK
    now = time.time()
    print(f"{'step':<40} {'host':<16} {'pid':>7}  {'run id':<28} {'attempt':>7}  heartbeat (writer's clock)")
    for lease in leases:
        o = lease.owner
        print(f"{lease.step_id:<40} {(o.host if o else '?'):<16} {(o.pid if o else 0):>7}  "
              f"{(o.run_id if o else '?'):<28} {lease.attempt:>7}  {_ago(lease.heartbeat_at, now)}")
    print("heartbeat ages are informational; staleness is judged by the executor on its own clock")
    return ExitCode.OK


def cmd_repair(args: Any) -> int:
    """Delete a step's status, read first through the read model: a RUNNING one only with --force."""
    path, opened = _step_path(args, args.delete_status)
    view, rel = opened.locate(path)
    row = view.steps([rel])[0]
    if row.state is Absent.NO_STATUS:
        print(f"{row.status_path}: no status file; nothing to repair")
        return ExitCode.OK
    if row.state is Absent.CORRUPT:
        print(f"{row.status_path}: {row.problem}")
    if row.state is State.RUNNING and not args.force:
        owner = row.owner
        who = f"{owner.host} pid {owner.pid} (run {owner.run_id})" if owner else "an unknown runner"
        print(f"refusing: {row.status_path} is RUNNING, leased by {who}, heartbeat "
              f"{_ago(row.written_at, time.time())}. Stop that runner (or wait for its lease to go stale), "
              f"or pass --force if it is gone.")
        return ExitCode.USAGE
    held = view.store.read(status_key(row.rel))
    view.store.delete(status_key(row.rel))
    shown = held.data[:600].decode(errors="replace") if held else ""
    print(f"deleted {row.status_path}; it held:\n{shown}")
    print("the step will run again on the next invocation (its record, if any, is replaced at its next commit)")
    return ExitCode.OK


def cmd_report(args: Any) -> int:
    from executor.tools.run_report import find_run, write_report

    opened = require_outputs(args)
    run = find_run(opened.view, args.run)
    print(f"run report: {write_report(opened, run.path)}")
    return ExitCode.OK


def guarded(handler: Any, args: Any) -> int:
    """Run a handler, turning the executor's own errors into exit code 2 with a message; a command
    asked for --json also prints the error as a JSON object on stdout, so stdout is always JSON."""
    try:
        return handler(args)
    except (ExecutorError, StatusError, ValueError) as e:
        return _error(args, str(e))
    except StoreError as e:
        return _error(args, f"storage: {e}")


def _error(args: Any, message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "exit_code": int(ExitCode.USAGE)}, indent=1))
    return ExitCode.USAGE


__all__ = ["cmd_accept_drift", "cmd_adopt", "cmd_check", "cmd_completion", "cmd_explain", "cmd_gc", "cmd_graph", "cmd_ids", "cmd_ps",
           "cmd_repair", "cmd_report", "cmd_run", "cmd_runs", "cmd_status", "cmd_verify", "guarded",
           "loads_experiment"]
