"""One typed read model of a prefix: its steps, runs and leases, and one step in full.

Everything that shows a prefix (`status`, `runs`, `ps`, `report`, `gc`, `serve`) reads it through
this module, and this module reads only through the coordination store's protocol (`read`,
`read_many`, `list_generations`): no paths built by hand, no error messages parsed. Reads only.

    view = PrefixView.open(prefix, storage)            # or PrefixView(store, prefix)
    view.list_steps()             -> {output rel: status generation}: ONE listing, no reads
    view.steps()                  -> [StepRow]: every status under the prefix (a listing + read_many)
    view.steps(rels, names=...)   -> [StepRow] of those output dirs (no status: Absent.NO_STATUS)
    view.steps(timings=True)      -> the same, a SUCCESS row's timing from its record.json
    view.refresh(rows)            -> [StepRow]: ONE listing; re-reads only statuses whose
                                     generation changed since `rows` (a live view's poll)
    view.leases(rows=None)        -> [Lease]: every RUNNING status, its holder and heartbeat
    view.list_runs()              -> {run file key: generation}: ONE listing of runs/, no reads
    view.runs(limit=0, keys=None) -> [RunRow]: runs/*.json (or those keys), newest first
                                     (unreadable: row.problem)
    view.run(ref=None)            -> RunRow by run id or file name; the newest run if None
    view.has_runs()               -> whether runs/ holds a run file (one listing)
    view.step(step_id, rows=None, runs=None)
                                  -> StepDetail: status, record, result, logs per attempt,
                                     dependencies and dependents (by step id, never by path)
    view.step_at(rel) / view.detail(row)  -> the same, by output dir (a command given a path) or row
    view.records(rels)            -> {rel: record.json} of those with a readable one (one read_many)
    view.logs(rel)                -> (LogRef, ...): an output dir's attempt logs (one listing)
    view.log_tail(step_id, attempt, max_bytes=65536) -> str: the end of one attempt's log

A row's `state` is `State | Absent` (core/record.py): RUNNING, SUCCESS, FAILED as stored, or
NO STATUS / CORRUPT (then `problem` says what is wrong, without the file's path or the fix).
Rows are frozen dataclasses; `to_json()` gives the rows of the commands' --json output.
Times are writers' wall clocks (informational: nothing here decides anything).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from executor.core.errors import StatusError
from executor.core.outcome import Outcome
from executor.core.record import (EXECUTOR_DIR, Absent, Owner, State, Status, parse_record, parse_run_file,
                                  parse_status, record_key, status_key)
from executor.engine.store.base import CoordinationStore, Versioned

STATUS_SUFFIX = f"/{EXECUTOR_DIR}/status.json"
RUNS_DIR = "runs/"
_LOG = re.compile(r"attempt-(\d+)\.log$")


# -- rows ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StepRow:
    """One step output under the prefix, as its status (and, if asked, its record) tells it."""

    rel: str  # its output directory relative to the prefix: where its status lives
    step_id: str
    name: str
    path: str  # the output directory's full path or URL
    state: State | Absent
    generation: str | None = None  # of the status read (a changed one means a new write)
    status: Status | None = None
    problem: str | None = None  # why the status is CORRUPT (or newer than this stepgraph)
    finished_at: float | None = None  # a record's timing where read, else the last status write
    seconds: float | None = None

    @property
    def attempt(self) -> int:
        return self.status.attempt if self.status else 0

    @property
    def owner(self) -> Owner | None:
        return self.status.owner if self.status else None

    @property
    def run_id(self) -> str | None:
        """The run that last wrote the status (its holder, while RUNNING)."""
        return self.owner.run_id if self.owner else None

    @property
    def started_at(self) -> float | None:
        return self.status.started_at if self.status else None

    @property
    def written_at(self) -> float | None:
        """The status's last write: a RUNNING status's heartbeat."""
        return self.status.written_at if self.status else None

    @property
    def error(self) -> str | None:
        """The last error: a FAILED step's, or what makes the status CORRUPT."""
        return self.problem or (self.status.error if self.status else None)

    @property
    def alias_of(self) -> str | None:
        return (self.status.alias_of or {}).get("step_id") if self.status else None

    @property
    def cut_off(self) -> str | None:
        """Why an early cutoff (executor.engine.run.cutoff) made this output an alias ("cut off: …"); None otherwise."""
        return (self.status.alias_of or {}).get("cut_off") if self.status else None

    @property
    def copied_from(self) -> str | None:
        """The prefix a --cache-from copy took this output from (None: made here)."""
        return self.status.copied_from if self.status else None

    @property
    def is_problem(self) -> bool:
        return self.state in (State.FAILED, Absent.CORRUPT)

    @property
    def status_path(self) -> str:
        """Where its status lives (to name it in a message)."""
        return f"{self.path}/{EXECUTOR_DIR}/status.json"

    def heartbeat_age(self, now: float) -> float | None:
        return None if self.written_at is None else max(0.0, now - self.written_at)

    def to_json(self) -> dict[str, Any]:
        owner = self.owner
        return {"step_id": self.step_id, "name": self.name, "rel": self.rel, "path": self.path,
                "state": self.state.value, "attempt": self.attempt, "started_at": self.started_at,
                "written_at": self.written_at, "finished_at": self.finished_at, "seconds": self.seconds,
                "error": self.error, "run_id": self.run_id, "host": owner.host if owner else None,
                "alias_of": self.alias_of, "cut_off": self.cut_off, "copied_from": self.copied_from}


@dataclass(frozen=True, slots=True)
class Lease:
    """A RUNNING status: who holds the step, and when it last renewed (wrote) its lease."""

    step_id: str
    rel: str
    owner: Owner | None
    attempt: int
    heartbeat_at: float
    generation: str | None

    def age(self, now: float) -> float:
        """Seconds since the holder's last heartbeat, on the holder's clock (informational:
        staleness is judged by the executor on its own clock)."""
        return max(0.0, now - self.heartbeat_at)


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run file (runs/<experiment>-<run id>.json): who ran what, when, how it ended."""

    key: str  # its key under the prefix
    path: str
    generation: str | None = None
    problem: str | None = None  # the run file could not be read (then the fields below are empty)
    run_id: str | None = None
    experiment: str | None = None
    experiment_file: str | None = None
    description: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    user: str | None = None
    host: str | None = None
    cwd: str | None = None
    argv: tuple[str, ...] = ()
    steps: int = 0  # in its plan
    skipped: int = 0
    ran: tuple[str, ...] = ()  # step ids this run executed
    failed: tuple[str, ...] = ()  # step ids that failed or were blocked
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)  # step id -> how it ended
    graph: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # step id -> its dependencies
    document: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)  # the whole file

    @property
    def seconds(self) -> float | None:
        return self.finished_at - self.started_at if self.started_at and self.finished_at else None

    @property
    def name(self) -> str:
        """<experiment>-<run id>: its file name without .json."""
        return self.key.removeprefix(RUNS_DIR).removesuffix(".json")

    @property
    def flags(self) -> tuple[str, ...]:
        """The command line after the experiment file: what tells one run of it from another."""
        return self.argv[1:]

    def to_json(self) -> dict[str, Any]:
        if self.problem:
            return {"file": self.path, "error": f"unreadable run file: {self.problem}"}
        return {"run_id": self.run_id, "experiment": self.experiment, "file": self.path,
                "started_at": self.started_at, "finished_at": self.finished_at, "seconds": self.seconds,
                "exit_code": self.exit_code, "user": self.user, "host": self.host, "cwd": self.cwd,
                "argv": list(self.argv), "steps": self.steps, "ran": list(self.ran), "failed": list(self.failed),
                "skipped": self.skipped}


@dataclass(frozen=True, slots=True)
class LogRef:
    """One attempt's log, `<output>/.executor/logs/attempt-<n>.log`."""

    attempt: int
    key: str
    generation: str


@dataclass(frozen=True, slots=True)
class StepDetail:
    """One step in full. `record` is record.json as stored (None: none, or unreadable: then
    `record_problem` says why, naming the file and what to do); dependencies and dependents are
    step ids."""

    row: StepRow
    record: Mapping[str, Any] | None
    record_problem: str | None
    logs: tuple[LogRef, ...]
    dependencies: tuple[str, ...]
    dependents: tuple[str, ...]

    @property
    def step_id(self) -> str:
        return self.row.step_id

    @property
    def status(self) -> Status | None:
        return self.row.status

    @property
    def result(self) -> Any:
        return (self.record or {}).get("result")


# -- the reader ---------------------------------------------------------------------------------

def _json_object(read: Versioned | None) -> dict[str, Any]:
    """A small JSON file read from the store as a dict ({} when absent or unreadable: shown as such)."""
    try:
        data = json.loads(read.data) if read is not None else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


class PrefixView:
    """Reads a prefix through its coordination store (see the module docstring)."""

    def __init__(self, store: CoordinationStore, prefix: str | None = None):
        self.store = store
        self.prefix = (prefix or store.root).rstrip("/")

    @classmethod
    def open(cls, prefix: str, storage: Any = None) -> PrefixView:
        """The view of `prefix` with the options `storage` has for it (see location.open_store)."""
        from executor.engine.prefix import location

        return cls(location.open_store(prefix, storage), prefix)

    def path_of(self, key: str) -> str:
        return f"{self.prefix}/{key}"

    # steps

    def list_steps(self) -> dict[str, str]:
        """Output rel -> its status's generation, from one listing (runs/ excluded)."""
        listed = self.store.list_generations("", STATUS_SUFFIX)
        return {key[: -len(STATUS_SUFFIX)]: generation for key, generation in sorted(listed.items())
                if key.endswith(STATUS_SUFFIX) and not key.startswith(RUNS_DIR)}

    def steps(self, rels: Iterable[str] | None = None, *, names: Mapping[str, str] | None = None,
              timings: bool = False) -> list[StepRow]:
        """A row per output rel (every status under the prefix if None); `names`: rel -> step name
        (from an experiment; otherwise the step id's part before its hash)."""
        rels = list(self.list_steps() if rels is None else rels)
        read = self.store.read_many([status_key(rel) for rel in rels])
        rows = [self._row(rel, versioned, names) for rel, versioned in zip(rels, read)]
        return self._with_timings(rows) if timings else rows

    def mirror_copies(self) -> list[dict[str, Any]]:
        """Each mirrored input's copy under the prefix (executor.engine.transfers.mirror): where it is, its state, and
        from its record where it came from (source, bytes, files); one listing, then a read of each."""
        from executor.engine.transfers.mirror import record_key

        root, suffix = f"mirror/{EXECUTOR_DIR}/", "/status.json"
        keys = sorted(k for k in self.store.list_generations(root, suffix) if k.endswith(suffix))
        rels = ["mirror/" + k[len(root):-len(suffix)] for k in keys]
        statuses = list(self.store.read_many(keys))
        records = list(self.store.read_many([record_key(rel) for rel in rels]))
        rows = []
        for rel, status, record in zip(rels, statuses, records):
            state = _json_object(status).get("state", "unreadable" if status is not None else None)
            made = _json_object(record)
            copied = made.get("copied") or {}
            rows.append({"path": rel, "state": state, "logical": made.get("logical"), "source": made.get("source"),
                         "bytes": copied.get("bytes"), "files": copied.get("files"), "run_id": made.get("run_id")})
        return rows

    def refresh(self, previous: Iterable[StepRow], *, timings: bool = False) -> list[StepRow]:
        """Every status under the prefix, from one listing, reading only those whose generation
        changed (or that are new) since `previous`; rows of removed statuses are gone."""
        known = {row.rel: row for row in previous}
        listed = self.list_steps()
        changed = [rel for rel, generation in listed.items()
                   if rel not in known or known[rel].generation != generation]
        fresh = {row.rel: row for row in self.steps(changed, timings=timings)}
        return [fresh.get(rel) or known[rel] for rel in listed]

    def leases(self, rows: Iterable[StepRow] | None = None) -> list[Lease]:
        """Every RUNNING status (from `rows` if given, else read now)."""
        rows = self.steps() if rows is None else rows
        return [Lease(r.step_id, r.rel, r.owner, r.attempt, r.written_at or 0.0, r.generation)
                for r in rows if r.state == State.RUNNING]

    def _row(self, rel: str, versioned: Versioned | None, names: Mapping[str, str] | None) -> StepRow:
        step_id, generation, status, problem = rel, None, None, None
        if versioned is None:
            state: State | Absent = Absent.NO_STATUS
        else:
            generation = versioned.generation
            try:
                status = parse_status(versioned.data, self.path_of(status_key(rel)))
                state, step_id = status.state, status.step_id
            except StatusError as e:
                state, problem = Absent.CORRUPT, e.problem
        name = (names or {}).get(rel) or step_id.rsplit("-", 1)[0]
        finished = status.written_at if status and status.state != State.RUNNING else None
        return StepRow(rel, step_id, name, self.path_of(rel), state, generation, status, problem, finished)

    def _with_timings(self, rows: list[StepRow]) -> list[StepRow]:
        """A SUCCESS row's finish time and duration from its record.json (one read_many)."""
        done = [i for i, row in enumerate(rows) if row.state == State.SUCCESS]
        rows = list(rows)
        for i, versioned in zip(done, self.store.read_many([record_key(rows[i].rel) for i in done])):
            record = self._record(rows[i].rel, versioned)[0]
            timings = (record or {}).get("timings") or {}
            if timings:
                rows[i] = replace(rows[i], finished_at=timings.get("finished_at") or rows[i].finished_at,
                                  seconds=timings.get("seconds"))
        return rows

    def records(self, rels: Sequence[str]) -> dict[str, dict[str, Any]]:
        """rel -> its record.json, for those that have a readable one (one read_many)."""
        rels = list(rels)
        read = self.store.read_many([record_key(rel) for rel in rels])
        found = {rel: self._record(rel, versioned)[0] for rel, versioned in zip(rels, read)}
        return {rel: record for rel, record in found.items() if record is not None}

    def _record(self, rel: str, versioned: Versioned | None) -> tuple[dict[str, Any] | None, str | None]:
        if versioned is None:
            return None, None
        try:
            return parse_record(versioned.data, self.path_of(record_key(rel))), None
        except StatusError as e:
            return None, str(e)  # names the file and what to do

    # runs

    def list_runs(self) -> dict[str, str]:
        """Run file key (runs/<name>.json) -> its generation, from one listing; reads nothing."""
        return dict(sorted(self.store.list_generations(RUNS_DIR, ".json").items()))

    def runs(self, limit: int = 0, keys: Iterable[str] | None = None) -> list[RunRow]:
        """Every run file under runs/ (or those `keys`, as list_runs names them: a live view reads
        only the ones whose generation changed), newest first (`limit`: the newest that many)."""
        keys = sorted(self.list_runs() if keys is None else keys)
        rows = [self._run_row(key, versioned) for key, versioned in zip(keys, self.store.read_many(keys))
                if versioned is not None]
        rows.sort(key=lambda r: r.started_at or 0, reverse=True)
        return rows[:limit] if limit else rows

    def has_runs(self) -> bool:
        return bool(self.list_runs())

    def run(self, ref: str | None = None) -> RunRow | None:
        """The run a run id or run file name (with or without runs/ and .json) names; the newest
        run if `ref` is None. None if no run matches; ValueError if several do."""
        rows = self.runs()
        if ref is None:
            return rows[0] if rows else None
        wanted = ref.rsplit("/", 1)[-1].removesuffix(".json").removesuffix(".html")
        matches = [r for r in rows if r.name == wanted or r.name.endswith(f"-{wanted}") or r.run_id == wanted]
        if len(matches) > 1:
            raise ValueError(f"run {ref!r} matches {len(matches)} run files: {', '.join(r.name for r in matches)}")
        return matches[0] if matches else None

    def _run_row(self, key: str, versioned: Versioned) -> RunRow:
        path = self.path_of(key)
        try:
            run = parse_run_file(versioned.data, path)
        except StatusError as e:
            return RunRow(key, path, versioned.generation, problem=str(e))
        invocation = run.get("invocation") or {}
        plan = run.get("plan") or []
        outcomes = {sid: Outcome(o) for sid, o in (run.get("outcome") or {}).items() if o in _OUTCOMES}
        return RunRow(
            key, path, versioned.generation, None, run.get("run_id"), run.get("experiment"),
            run.get("experiment_file"), run.get("description"), run.get("started_at"), run.get("finished_at"),
            run.get("exit_code"), invocation.get("user"), invocation.get("host"), invocation.get("cwd"),
            tuple(invocation.get("argv") or ()), len(plan), sum(1 for p in plan if p.get("action") == "skip"),
            tuple(run.get("ran_here") or ()), tuple(sorted(s for s, o in outcomes.items() if o.unsuccessful)),
            outcomes, {sid: tuple(deps) for sid, deps in (run.get("graph") or {}).items()}, run)

    # one step

    def step(self, step_id: str, rows: Sequence[StepRow] | None = None,
             runs: Sequence[RunRow] | None = None) -> StepDetail | None:
        """One step in full, by its step id; None if the prefix holds no status of it. Pass the
        rows and runs already read (a live view has them) to spare reading them again."""
        row = self._find(step_id, rows)
        return None if row is None else self.detail(row, rows, runs)

    def step_at(self, rel: str, rows: Sequence[StepRow] | None = None,
                runs: Sequence[RunRow] | None = None) -> StepDetail:
        """The step whose output directory is `rel` (a command given a path), status or not."""
        return self.detail(self.steps([rel])[0], rows, runs)

    def detail(self, row: StepRow, rows: Sequence[StepRow] | None = None,
               runs: Sequence[RunRow] | None = None) -> StepDetail:
        """A row in full: its record, logs, dependencies and dependents (from `rows` and `runs`,
        read now if None; pass () to leave the others unread)."""
        rows = self.steps() if rows is None else rows
        runs = self.runs() if runs is None else runs
        record, record_problem = self._record(row.rel, self.store.read(record_key(row.rel)))
        return StepDetail(row, record, record_problem, self._logs(row.rel),
                          _dependencies(row, record, rows, runs), _dependents(row, rows, runs))

    def _find(self, step_id: str, rows: Sequence[StepRow] | None) -> StepRow | None:
        if rows is None:  # a step's output dir is its step id unless the step overrides it
            direct = self.steps([step_id])[0]
            if direct.step_id == step_id and direct.state != Absent.NO_STATUS:
                return direct
            rows = self.steps()
        return next((r for r in rows if r.step_id == step_id), None)

    def logs(self, rel: str) -> tuple[LogRef, ...]:
        """The attempt logs of the output dir `rel` (one listing; a live view re-lists them)."""
        return self._logs(rel)

    def _logs(self, rel: str) -> tuple[LogRef, ...]:
        listed = self.store.list_generations(f"{rel}/{EXECUTOR_DIR}/logs/", ".log")
        logs = [LogRef(int(m.group(1)), key, generation) for key, generation in listed.items()
                if (m := _LOG.search(key))]
        return tuple(sorted(logs, key=lambda log: log.attempt))

    def log_tail(self, step_id: str, attempt: int, max_bytes: int = 1 << 16) -> str:
        """The last `max_bytes` of an attempt's log ('' if there is none). The whole object is
        read: the store protocol has no ranged read."""
        row = self._find(step_id, None)
        rel = row.rel if row else step_id
        versioned = self.store.read(f"{rel}/{EXECUTOR_DIR}/logs/attempt-{int(attempt)}.log")
        return versioned.data[-max_bytes:].decode(errors="replace") if versioned else ""


_OUTCOMES = {o.value for o in Outcome}


def _digest_to_step(rows: Sequence[StepRow]) -> dict[str, str]:
    return {r.status.digest: r.step_id for r in rows if r.status}


def _dependencies(row: StepRow, record: Mapping[str, Any] | None, rows: Sequence[StepRow],
                  runs: Sequence[RunRow]) -> tuple[str, ...]:
    """From its record, its status's consumed inputs and the runs' graphs, in that order."""
    found = [d["step_id"] for d in (record or {}).get("dependencies") or [] if d.get("step_id")]
    by_digest = _digest_to_step(rows)
    found += [by_digest[d] for d in ((row.status.inputs if row.status else None) or {}) if d in by_digest]
    for run in runs:
        found += run.graph.get(row.step_id, ())
    return tuple(dict.fromkeys(found))


def _dependents(row: StepRow, rows: Sequence[StepRow], runs: Sequence[RunRow]) -> tuple[str, ...]:
    """Steps whose status consumed this one's output, or that a run's graph makes depend on it."""
    digest = row.status.digest if row.status else None
    found = [r.step_id for r in rows if digest and r.status and digest in (r.status.inputs or {})]
    for run in runs:
        found += [sid for sid, deps in run.graph.items() if row.step_id in deps]
    return tuple(sorted(set(found)))


__all__ = ["Lease", "LogRef", "PrefixView", "RunRow", "StepDetail", "StepRow"]
