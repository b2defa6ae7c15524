"""The handlers behind `python -m executor <command>`: each takes parsed arguments, returns an exit code.

Argument parsing lives in executor/__main__.py; the work lives in the modules named per command
(plan_check, plan_file, adopt, verify, gc). What is here is presentation: reading a status,
printing tables, turning errors into exit codes (0 ok, 1 problems found, 2 usage, 3 changes).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from executor.engine import location
from executor.engine import outputs
from executor.core.errors import ExecutorError, StatusError
from executor.engine.progress import human_bytes
from executor.core.record import EXECUTOR_DIR, State, parse_status
from executor.engine.store import StoreError

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_CHANGED = 0, 1, 2, 3


def default_prefix(prefix: str | None) -> str:
    from executor.engine.prefixes import DEFAULT_PREFIX

    return outputs.normalize_prefix(prefix or os.environ.get("EXECUTOR_PREFIX") or DEFAULT_PREFIX)


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


def _step_path(path: str) -> str:
    """A step output directory from a path to it or to its status file."""
    path = path.rstrip("/")
    suffix = f"/{EXECUTOR_DIR}/status.json"
    if path.endswith(suffix):
        path = path[: -len(suffix)]
    return outputs.normalize_prefix(path) if outputs.is_local(path) else path


# -- plan ---------------------------------------------------------------------------------------

def cmd_plan(args: Any) -> int:
    from executor.tools.loading import load_experiment
    from executor.tools.plan_file import dumps, plan_document

    loaded = load_experiment(args.experiment, args.experiment_args)
    print(dumps(plan_document(loaded.graph, loaded.stem)), end="")
    return EXIT_OK


def cmd_check(args: Any) -> int:
    from executor.tools.plan_check import check_experiments

    return check_experiments(args.paths)


# -- adopt --------------------------------------------------------------------------------------

def cmd_adopt(args: Any) -> int:
    from executor.tools.adopt import adopt
    from executor.tools.loading import load_experiment
    from executor.engine.provenance import git_state, user_and_host

    prefix = default_prefix(args.prefix)
    loaded = load_experiment(args.experiment, args.experiment_args)
    declared_by = {**user_and_host(), "git": git_state(os.path.dirname(loaded.path)), "command": "adopt"}
    result = adopt(loaded.graph, args.name, args.from_, prefix, reason=args.reason, declared_by=declared_by,
                   storage_options=args.storage_options)
    print(f"adopted: {result.node.step_id} is now an alias of {result.alias_of['step_id']} "
          f"({prefix}/{result.alias_of['output_rel']})")
    if result.differences:
        print("identity differences the adoption declares irrelevant:")
        for line in result.differences:
            print(f"    {line}")
    print(f"record: {result.record_path}; dependents now resolve to the adopted output and a re-run skips")
    return EXIT_OK


# -- verify ---------------------------------------------------------------------------------------

def cmd_verify(args: Any) -> int:
    from executor.tools.verify import verify_path

    path = _step_path(args.path)
    results = verify_path(path, args.storage_options)
    if not results:
        print(f"no step outputs found under {path}")
        return EXIT_USAGE
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
    return EXIT_PROBLEMS if problems else EXIT_OK


# -- gc -------------------------------------------------------------------------------------------

def cmd_gc(args: Any) -> int:
    from executor.tools.gc import collect, experiment_outputs, sweep
    from executor.tools.loading import load_experiment

    prefix = default_prefix(args.prefix)
    roots: dict[str, str] = {}
    for path in args.experiments:
        for rel, why in experiment_outputs(path, load_experiment(path).graph).items():
            roots.setdefault(rel, why)
    report = collect(prefix, roots, args.pin, args.storage_options)
    print(f"prefix {prefix}: {len(report.kept_present)} output(s) reachable from "
          f"{len(args.experiments)} experiment(s) and {len(args.pin)} pin(s); "
          f"{len(report.garbage)} unreachable, {human_bytes(report.garbage_bytes)}")
    now = time.time()
    for o in report.garbage:
        print(f"    {human_bytes(o.size):>10}  {o.state:<9}  {_ago(o.last_written, now):>12}  {o.rel}")
    if not args.delete:
        if report.garbage:
            print(f"nothing deleted; add --delete (outputs older than --grace-hours {args.grace_hours:g}) to delete")
        return EXIT_OK
    sweep(report, grace_hours=args.grace_hours, now=now, storage_options=args.storage_options)
    for rel in report.deleted:
        print(f"deleted {rel}")
    for rel, why in report.spared.items():
        print(f"kept {rel}: {why}")
    print(f"deleted {len(report.deleted)} output(s); kept {len(report.spared)} unreachable one(s)")
    return EXIT_OK


# -- status, ps, repair ---------------------------------------------------------------------------

def _read_status(step_path: str, storage_options: dict | None):
    store = location.open_location(step_path, storage_options)[0]
    versioned = store.read(f"{EXECUTOR_DIR}/status.json")
    return store, versioned


def cmd_status(args: Any) -> int:
    path = _step_path(args.path)
    _, versioned = _read_status(path, args.storage_options)
    now = time.time()
    if versioned is None:
        print(f"{path}: no status (never started here, or deleted by repair)")
        return EXIT_PROBLEMS
    where = f"{path}/{EXECUTOR_DIR}/status.json"
    status = parse_status(versioned.data, where)  # a corrupt one raises with the repair hint
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
    if status.error:
        print(f"  error       {status.error}")
    if status.traceback_tail:
        print("  traceback (tail):\n    " + status.traceback_tail.rstrip()[-1500:].replace("\n", "\n    "))
    fs = location.open_filesystem(path, args.storage_options)
    record = outputs.read_json(fs, f"{path}/{EXECUTOR_DIR}/record.json")
    if not isinstance(record, dict):
        print("  record      none")
        return EXIT_OK
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
    for dep in record.get("dependencies") or []:
        print(f"  depends on  {dep.get('step_id')} -> {dep.get('path')}")
    if record.get("result") is not None:
        print(f"  result      {json.dumps(record['result'], default=str)[:300]}")
    return EXIT_OK


def cmd_ps(args: Any) -> int:
    prefix = default_prefix(args.prefix)
    store = location.open_location(prefix, args.storage_options)[0]
    keys = store.list_generations("", f"{EXECUTOR_DIR}/status.json")
    now = time.time()
    rows = []
    for key in sorted(keys):
        if key.startswith("runs/"):
            continue
        versioned = store.read(key)
        if versioned is None:
            continue
        try:
            status = parse_status(versioned.data, f"{prefix}/{key}")
        except StatusError as e:
            print(f"warning: {e}")
            continue
        if status.state == State.RUNNING:
            rows.append(status)
    if not rows:
        print(f"no RUNNING leases under {prefix}")
        return EXIT_OK
    print(f"{'step':<40} {'host':<16} {'pid':>7}  {'run id':<28} {'attempt':>7}  heartbeat (writer's clock)")
    for s in rows:
        o = s.owner
        print(f"{s.step_id:<40} {(o.host if o else '?'):<16} {(o.pid if o else 0):>7}  "
              f"{(o.run_id if o else '?'):<28} {s.attempt:>7}  {_ago(s.written_at, now)}")
    print("heartbeat ages are informational; staleness is judged by the executor on its own clock")
    return EXIT_OK


def cmd_repair(args: Any) -> int:
    path = _step_path(args.delete_status)
    store, versioned = _read_status(path, args.storage_options)
    where = f"{path}/{EXECUTOR_DIR}/status.json"
    if versioned is None:
        print(f"{where}: no status file; nothing to repair")
        return EXIT_OK
    try:
        status = parse_status(versioned.data, where)
        state = status.state
    except StatusError as e:
        status, state = None, None
        print(f"{where}: {str(e).split('. Inspect')[0]}")
    if state == State.RUNNING and not args.force:
        owner = status.owner
        who = f"{owner.host} pid {owner.pid} (run {owner.run_id})" if owner else "an unknown runner"
        print(f"refusing: {where} is RUNNING, leased by {who}, heartbeat {_ago(status.written_at, time.time())}. "
              f"Stop that runner (or wait for its lease to go stale), or pass --force if it is gone.")
        return EXIT_USAGE
    shown = versioned.data[:600].decode(errors="replace")
    store.delete(f"{EXECUTOR_DIR}/status.json")
    print(f"deleted {where}; it held:\n{shown}")
    print("the step will run again on the next invocation (its record, if any, is replaced at its next commit)")
    return EXIT_OK


def cmd_report(args: Any) -> int:
    from executor.tools.run_report import run_file_path, write_report

    prefix = default_prefix(args.prefix)
    fs = outputs.filesystem(prefix, args.storage_options)
    print(f"run report: {write_report(prefix, run_file_path(fs, prefix, args.run), fs=fs)}")
    return EXIT_OK


def guarded(handler: Any, args: Any) -> int:
    """Run a handler, turning the executor's own errors into exit code 2 with a message."""
    try:
        return handler(args)
    except (ExecutorError, StatusError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as e:
        print(f"error: storage: {e}", file=sys.stderr)
        return EXIT_USAGE


__all__ = ["cmd_adopt", "cmd_check", "cmd_gc", "cmd_plan", "cmd_ps", "cmd_repair", "cmd_report", "cmd_status", "cmd_verify",
           "guarded"]
