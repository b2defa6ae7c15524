"""Schema-versioned JSON formats: the status object (coordination), the step record and the run file.

"Done" means status.json says SUCCESS for this digest, nothing else. A status written by a newer
executor is refused, never overwritten; a corrupt one is an error that says how to repair it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from executor.core.errors import StatusError
from executor.core.frozen import new_frozen

STATUS_SCHEMA = 1
RECORD_SCHEMA = 1
RUN_SCHEMA = 1
EXECUTOR_DIR = ".executor"


class State(enum.StrEnum):
    """What status.json stores (the other vocabularies, and the mapping: core/outcome.py); str() is
    the stored word."""

    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class Absent(enum.StrEnum):
    """What a status read found when there is no State to show: read models' rows hold
    `State | Absent`, so that "no status" and "corrupt" are values, not strings made up per command."""

    NO_STATUS = "NO STATUS"
    CORRUPT = "CORRUPT"


def status_key(output_rel: str) -> str:
    return f"{output_rel}/{EXECUTOR_DIR}/status.json"


def record_key(output_rel: str) -> str:
    return f"{output_rel}/{EXECUTOR_DIR}/record.json"


@dataclass(frozen=True)
class Owner:
    run_id: str
    host: str
    pid: int
    user: str


@dataclass(frozen=True)
class Status:
    state: State
    digest: str
    step_id: str
    seq: int
    attempt: int
    owner: Owner | None
    written_at: float  # writer's wall clock (informational: never used for decisions)
    started_at: float | None = None
    error: str | None = None
    traceback_tail: str | None = None
    alias_of: dict[str, str] | None = None
    function_sha256: str | None = None  # provenance of a SUCCESS: lets plans spot code drift without reading records
    content_sha256: str | None = None  # of a SUCCESS: the output's manifest digest (see output_digest)
    inputs: dict[str, str] | None = None  # of a SUCCESS: dependency digest -> its content_sha256 as consumed
    copied_from: str | None = None  # of a SUCCESS copied by --cache-from: the source prefix (its inputs were there)
    schema: int = STATUS_SCHEMA

    def to_bytes(self) -> bytes:
        data = dict(self.__dict__)  # not asdict(): its deep copies cost more than the write (issue 4)
        if data["copied_from"] is None:  # written only by copies: every other status stays as it was
            del data["copied_from"]
        data["state"] = self.state.value
        data["owner"] = dict(self.owner.__dict__) if self.owner else None
        return json.dumps(data, sort_keys=True, indent=1).encode()

    def next(self, **changes: Any) -> "Status":
        """The next write of this status: the sequence number always moves on."""
        return replace(self, seq=self.seq + 1, **changes)


_STATES = {state.value: state for state in State}


def parse_status(data: bytes, where: str, owners: dict[tuple, Owner] | None = None) -> Status:
    """`owners`: Owner objects already made, to share (a snapshot of 10,000 statuses that one run
    wrote holds one owner, not 10,000 equal ones)."""
    try:
        raw = orjson.loads(data)   # planning reads one status per step: the fast parser pays
        schema = raw.get("schema")
        if not isinstance(schema, int):
            raise ValueError("no schema field")
        if schema > STATUS_SCHEMA:
            newer = f"status schema {schema} is newer than this executor understands ({STATUS_SCHEMA})"
            raise StatusError(f"{where}: {newer}; upgrade stepgraph. The file was left untouched.", newer)
        owner = raw.get("owner")
        if owner:
            fields = (owner["run_id"], owner["host"], owner["pid"], owner["user"])
            owners = {} if owners is None else owners
            owner = owners.get(fields)
            if owner is None:
                owner = owners[fields] = new_frozen(Owner, dict(zip(("run_id", "host", "pid", "user"), fields)))
        state = raw["state"]
        return new_frozen(Status, {
            "state": _STATES.get(state) or State(state), "digest": str(raw["digest"]),
            "step_id": str(raw["step_id"]), "seq": int(raw["seq"]), "attempt": int(raw["attempt"]),
            "owner": owner or None,
            "written_at": float(raw["written_at"]), "started_at": raw.get("started_at"), "error": raw.get("error"),
            "traceback_tail": raw.get("traceback_tail"), "alias_of": raw.get("alias_of"),
            "function_sha256": raw.get("function_sha256"), "content_sha256": raw.get("content_sha256"),
            "inputs": raw.get("inputs"), "copied_from": raw.get("copied_from"), "schema": schema,
        })
    except StatusError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        repair = (f"Inspect it with `python -m executor status {where}`; if no runner is using it, "
                  f"delete it (`python -m executor repair --delete-status {where}`) and the step re-runs.")
        problem = f"corrupt status file ({type(e).__name__}: {e})"
        raise StatusError(f"{where}: {problem}. {repair}", problem) from None


def parse_record(data: bytes, where: str) -> dict[str, Any]:
    """A step's record.json, checked: a JSON object of a schema this executor reads, with the fields
    every tool relies on and a manifest (if any) of entries that name their path. Anything else is a
    StatusError naming the file; the file is left alone."""
    fix = "Re-run the step with --force-run to rewrite it."
    record = _parse_versioned(data, where, "record", RECORD_SCHEMA, ("step_id", "digest", "name"), fix)
    damage = _manifest_damage(record.get("manifest"))
    if damage:
        problem = f"corrupt record: {damage}"
        raise StatusError(f"{where}: {problem}; it was left untouched. {fix}", problem)
    return record


def _manifest_damage(manifest: Any) -> str | None:
    """Why a record's manifest cannot be read (verify and the output digest key its entries by path)."""
    if manifest is None:
        return None
    if not isinstance(manifest, list):
        return f"its manifest is a {type(manifest).__name__}, not a list of files"
    for number, entry in enumerate(manifest):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            return f"manifest entry {number} names no path: {json.dumps(entry)[:80]}"
    return None


def parse_run_file(data: bytes, where: str) -> dict[str, Any]:
    """A run file (runs/<experiment>-<run id>.json), checked like a record."""
    return _parse_versioned(data, where, "run file", RUN_SCHEMA, ("run_id", "steps"),
                            "Run files are history only: move it aside if it is in the way.")


def _parse_versioned(data: bytes, where: str, kind: str, supported: int, required: tuple[str, ...],
                     fix: str) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except ValueError as e:  # UnicodeDecodeError included
        problem = f"corrupt {kind} ({type(e).__name__}: {e})"
        raise StatusError(f"{where}: {problem}; it was left untouched. {fix}", problem) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("schema"), int):
        problem = f"not a {kind} (no integer `schema` field)"
        raise StatusError(f"{where}: {problem}; it was left untouched. {fix}", problem)
    if raw["schema"] > supported:
        problem = f"{kind} schema {raw['schema']} is newer than this executor understands ({supported})"
        raise StatusError(f"{where}: {problem}; upgrade stepgraph. The file was left untouched.", problem)
    missing = [key for key in required if key not in raw]
    if missing:
        problem = f"corrupt {kind}: no {', '.join(missing)} field(s)"
        raise StatusError(f"{where}: {problem}; it was left untouched. {fix}", problem)
    return raw


@dataclass(frozen=True)
class RunRecordRef:
    """Where a run file lives: runs/<experiment>-<UTC timestamp>-<hex>.json."""

    experiment: str
    run_id: str

    @property
    def key(self) -> str:
        return f"runs/{self.experiment}-{self.run_id}.json"


def output_digest(manifest: list[dict[str, Any]]) -> str:
    """What a step's output holds, as one digest: sha256 over its manifest's paths and checksums.
    A re-run that writes identical bytes gets the same digest, so its dependents stay current."""
    import hashlib

    entries = sorted((e["path"], json.dumps(e.get("checksum"), sort_keys=True)) for e in manifest)
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def to_json_bytes(data: dict[str, Any]) -> bytes:
    return json.dumps(data, indent=1, sort_keys=True, default=str).encode()


@dataclass
class StepRecord:
    """record.json: written before the fenced commit that flips the status to SUCCESS."""

    step_id: str
    digest: str
    name: str
    identity: dict[str, Any]
    config: Any
    dependencies: list[dict[str, str]]
    provenance: dict[str, Any]
    result: Any
    manifest: list[dict[str, Any]]
    timings: dict[str, float]
    attempt: int
    run_id: str
    schema: int = RECORD_SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)
    result_type: str | None = None  # `module:qualname` when the step returned a dataclass (stored as its fields)

    def to_bytes(self) -> bytes:
        # A shallow dict: asdict() would deep-copy the (possibly large) config and manifest.
        return json.dumps(dict(vars(self)), sort_keys=True, default=str).encode()
