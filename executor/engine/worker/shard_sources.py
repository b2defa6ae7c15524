"""Other prefixes' outputs as sources of shard results (`--cache-from`, issue 48).

A run with `--cache-from P` hands each step's call the run's prefix and the cache-from prefixes
(`CacheFrom`, in `StepCall.cache_from`); the runner makes them the step's while it runs, as it does
its storage options (a context variable, so two runs in one process never see each other's). An
incremental data step asks `cache_from_outputs(output_path)` for the outputs of its own step name
under those prefixes that it may take shard results from: each has a SUCCESS status there with a
readable record (its manifest), and its digest is tainted neither there nor in the run's prefix
(executor.tools.taint's files: `<prefix>/taints/<digest>.json`, last event a taint). The step still
checks every file it copies against the sha256 its shard index records.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from dataclasses import dataclass
from typing import Iterator

from executor.core.errors import StatusError
from executor.core.record import State, parse_record, parse_status, record_key, status_key
from executor.engine.prefix import location

_ID_SUFFIX = re.compile(r"^(?P<name>.+)-[0-9a-f]{12}$")  # core.identity: <name>-<12 hex>


@dataclass(frozen=True)
class CacheFrom:
    """The run's prefix and its --cache-from prefixes (normalized, in order)."""

    prefix: str
    sources: tuple[str, ...]


_current: contextvars.ContextVar[CacheFrom | None] = contextvars.ContextVar("stepgraph_cache_from", default=None)


@contextlib.contextmanager
def caching_from(cache_from: CacheFrom | None) -> Iterator[None]:
    """Make `cache_from` the running step's for the block (runners do this around a step function)."""
    token = _current.set(cache_from)
    try:
        yield
    finally:
        _current.reset(token)


def cache_from_outputs(output_path: str) -> list[str]:
    """The outputs of this step's name (`<name>-<12 hex>`) under the run's --cache-from prefixes that a
    step may reuse shard results from: SUCCESS there, with a readable record, tainted in neither
    prefix. Empty outside a step, without --cache-from, or for an output not under the run's prefix."""
    given = _current.get()
    out = output_path.rstrip("/")
    if given is None or not given.sources or not out.startswith(given.prefix.rstrip("/") + "/"):
        return []
    rel = out[len(given.prefix.rstrip("/")) + 1:]
    folder, _, base = rel.rpartition("/")
    match = _ID_SUFFIX.match(base)
    if match is None:
        return []
    storage = location.current_storage()
    own = location.open_store(given.prefix, storage)
    found = []
    for source in given.sources:
        store = location.open_store(source, storage)
        for candidate in _named_like(source, folder, match["name"], storage):
            digest = _committed_digest(store, candidate)
            if digest is not None and not _tainted(store, digest) and not _tainted(own, digest):
                found.append(f"{source.rstrip('/')}/{candidate}")
    return found


def _named_like(source: str, folder: str, name: str, storage: object) -> list[str]:
    fs, target = location.url_to_fs(f"{source.rstrip('/')}/{folder}".rstrip("/"), storage)
    try:
        entries = fs.ls(target, detail=False)
    except FileNotFoundError:
        return []
    bases = {e.rstrip("/").rsplit("/", 1)[-1] for e in entries}
    return sorted(f"{folder}/{b}".lstrip("/") for b in bases if (m := _ID_SUFFIX.match(b)) and m["name"] == name)


def _committed_digest(store: object, rel: str) -> str | None:
    """The digest of a SUCCESS output at `rel` with a readable record of that digest, else None."""
    status_read, record_read = store.read_many([status_key(rel), record_key(rel)])  # type: ignore[attr-defined]
    if status_read is None or record_read is None:
        return None
    try:
        status = parse_status(status_read.data, rel)
        record = parse_record(record_read.data, rel)
    except StatusError:
        return None
    if status.state is not State.SUCCESS or status.alias_of or record.get("digest") != status.digest:
        return None
    return status.digest


def _tainted(store: object, digest: str) -> bool:
    read = store.read(f"taints/{digest}.json")  # type: ignore[attr-defined]  # executor.tools.taint.taint_key
    if read is None:
        return False
    try:
        events = json.loads(read.data)["events"]
    except (ValueError, KeyError, TypeError):
        return True  # unreadable: refused, as a copy of a source we cannot judge
    return bool(events) and events[-1].get("action") == "taint"
