"""A view of a whole prefix: every step with its state, and the history of runs.

`step_rows` reads every status under the prefix (or each step of an experiment, started or not)
plus its record's timing; `run_rows` reads `runs/*.json`. Both return plain dicts, so the same
rows feed the table printed for people and the `--json` output. Reads only.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from executor.core.errors import StatusError
from executor.core.graph import Graph
from executor.core.record import EXECUTOR_DIR, parse_status, record_key, status_key
from executor.engine import location, outputs
from executor.engine.snapshot import read_many


def step_rels(prefix: str, storage_options: dict | None) -> list[str]:
    """Output dirs (relative to the prefix) holding a status file; runs/ excluded."""
    store = location.open_location(prefix, storage_options)[0]
    suffix = f"/{EXECUTOR_DIR}/status.json"
    return sorted(k[: -len(suffix)] for k in store.list_generations("", suffix)
                  if not k.startswith("runs/") and k.endswith(suffix))


def step_rows(prefix: str, rels: Iterable[str], storage_options: dict | None = None,
              names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per output rel: state, finished when, duration, attempts, last error, writing run.
    `names` (rel -> step name) comes from an experiment; a rel without a status is 'not started'."""
    rels = list(rels)
    store, fs = location.open_location(prefix, storage_options)
    rows = []
    for rel, versioned in zip(rels, read_many(store, [status_key(r) for r in rels])):
        row: dict[str, Any] = {"step_id": rel, "name": (names or {}).get(rel) or rel.rsplit("-", 1)[0],
                               "path": outputs.join(prefix, rel), "state": "NOT STARTED", "attempt": 0,
                               "finished_at": None, "seconds": None, "error": None, "run_id": None,
                               "host": None, "alias_of": None}
        if versioned is not None:
            try:
                status = parse_status(versioned.data, f"{prefix}/{status_key(rel)}")
            except StatusError as e:
                row.update(state="CORRUPT", error=str(e).split(". Inspect")[0])
                rows.append(row)
                continue
            row.update(state=status.state.value, attempt=status.attempt, error=status.error,
                       run_id=status.owner.run_id if status.owner else None,
                       host=status.owner.host if status.owner else None,
                       alias_of=(status.alias_of or {}).get("step_id"), written_at=status.written_at)
            if status.state.value != "RUNNING":
                row["finished_at"] = status.written_at
            if status.state.value == "SUCCESS":
                try:
                    record = outputs.read_record(fs, outputs.join(prefix, record_key(rel)))
                except (StatusError, OSError):
                    record = None
                timings = (record or {}).get("timings")
                if timings:
                    row["seconds"] = timings.get("seconds")
                    row["finished_at"] = timings.get("finished_at") or row["finished_at"]
        rows.append(row)
    return rows


def experiment_rows(graph: Graph, prefix: str, storage_options: dict | None = None) -> list[dict[str, Any]]:
    names = {n.output_rel: n.name for n in graph.nodes.values()}
    return step_rows(prefix, names, storage_options, names)


def run_rows(prefix: str, storage_options: dict | None = None, limit: int = 0) -> list[dict[str, Any]]:
    """The run files under runs/, newest first: who ran what, when, how it ended, what ran."""
    fs = location.open_filesystem(prefix, storage_options)
    try:
        paths = sorted(fs.glob(outputs.join(prefix, "runs", "*.json")))
    except FileNotFoundError:
        paths = []
    rows = []
    for path in paths:
        try:
            run = outputs.read_run_file(fs, path)
        except (StatusError, OSError) as e:
            rows.append({"file": path, "error": f"unreadable run file: {e}"})
            continue
        if run is None:
            continue
        plan = run.get("plan") or []
        invocation = run.get("invocation") or {}
        outcome = run.get("outcome") or {}
        started, finished = run.get("started_at"), run.get("finished_at")
        rows.append({
            "run_id": run.get("run_id"), "experiment": run.get("experiment"), "file": path,
            "started_at": started, "finished_at": finished,
            "seconds": (finished - started) if started and finished else None,
            "exit_code": run.get("exit_code"), "user": invocation.get("user"), "host": invocation.get("host"),
            "argv": invocation.get("argv"), "steps": len(plan),
            "ran": list(run.get("ran_here") or []),
            "failed": sorted(sid for sid, state in outcome.items() if state in ("failed", "blocked")),
            "skipped": sum(1 for p in plan if p.get("action") == "skip"),
        })
    rows.sort(key=lambda r: r.get("started_at") or 0, reverse=True)
    return rows[:limit] if limit else rows


def when(then: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(then)) if then else "-"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def print_step_table(rows: list[dict[str, Any]], say: Any = print) -> None:
    width = max([len(r["step_id"]) for r in rows] + [4])
    say(f"{'step':<{width}}  {'state':<11} {'finished':<19}  {'took':>8}  {'try':>3}  {'run':<24} last error")
    for r in rows:
        error = (r.get("error") or "").replace("\n", " ")
        alias = f"(alias of {r['alias_of']}) " if r.get("alias_of") else ""
        say(f"{r['step_id']:<{width}}  {r['state']:<11} {when(r['finished_at']):<19}  {duration(r['seconds']):>8}  "
            f"{r['attempt']:>3}  {(r['run_id'] or '-'):<24} {alias}{error[:100]}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    say(f"{len(rows)} step(s): " + ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items())))


def print_run_table(rows: list[dict[str, Any]], say: Any = print) -> None:
    say(f"{'run':<45} {'started':<19}  {'took':>8}  {'exit':>4}  {'ran':>4} {'failed':>6}  command")
    for r in rows:
        if "error" in r:
            say(f"{r['file']}: {r['error']}")
            continue
        name = f"{r['experiment']}-{r['run_id']}"
        exit_code = "-" if r["exit_code"] is None else str(r["exit_code"])
        argv = " ".join(r.get("argv") or [])
        say(f"{name:<45} {when(r['started_at']):<19}  {duration(r['seconds']):>8}  {exit_code:>4}  "
            f"{len(r['ran']):>4} {len(r['failed']):>6}  {r.get('user') or '?'}@{r.get('host') or '?'}: {argv[:80]}")
