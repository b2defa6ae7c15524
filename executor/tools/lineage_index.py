"""The edges `lineage --down` walks for outputs that left no lineage markers (committed before
markers existed, failed, running, adopted or carried over: executor/engine/prefix/lineage_marks.py),
kept under the prefix so a walk costs a listing and a read, not two reads a step.

`<prefix>/lineage/edges.json` maps each output rel to what its status and record said when they were
last read: the status's generation, digest and state, the digests it was made from (`consumed by` a
dependency, `adopted as` an alias, `reads tag NAME@VERSION`), and its digest of before issue 44 when its
record was re-keyed in place (an override_output_path: what consumed it then named that digest). A walk
lists the statuses (one listing, which gives every generation) and reads the index (one read); only
outputs whose status generation differs from the index's (new, re-run, re-written, a RUNNING heartbeat)
have their status and record read again, then the index is written back by compare-and-swap (a lost
race or a store that refuses the write, such as read-only credentials, leaves it as it was: the next
walk reads those outputs again). Nothing is trusted without its generation: a status written since the
index was made is always read, so the index can be behind, never wrong. A record is written before its
status's last write and not after, so the generation stands for both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from executor.engine.prefix.lineage_marks import made_from, tags_read
from executor.engine.store.base import StoreError
from executor.engine.prefix.prefix_view import PrefixView, StepRow

INDEX_KEY = "lineage/edges.json"
SCHEMA = 2


@dataclass(frozen=True)
class Entry:
    """One output as the index holds it; `made_from`: (digest, how) pairs, how it relates to each."""

    generation: str | None
    digest: str | None
    state: str
    made_from: tuple[tuple[str, str], ...]
    legacy_digest: str | None = None  # its digest of before issue 44 (its record re-keyed in place)

    def to_json(self) -> list[Any]:
        return [self.generation, self.digest, self.state, [list(e) for e in self.made_from], self.legacy_digest]

    @classmethod
    def from_json(cls, raw: Any) -> Entry:
        generation, digest, state, made_from, legacy_digest = raw
        return cls(generation, digest, str(state), tuple((str(d), str(h)) for d, h in made_from), legacy_digest)


def entries(view: PrefixView, cost: dict[str, int], listed: dict[str, str] | None = None) -> dict[str, Entry]:
    """rel -> Entry of every output under the prefix (or of `listed`: rel -> status generation, those
    outputs only): one listing (none when `listed` is given), one read of the index, and a status and a
    record read for each output changed since the index was written (counted in `cost`)."""
    if listed is None:
        listed = view.list_steps()
        cost["listings"] += 1
    known, generation = _read_index(view, cost)
    stale = [rel for rel, g in listed.items() if rel not in known or known[rel].generation != g]
    found = {rel: known[rel] for rel in listed if rel not in stale}
    if stale:
        rows = view.steps(stale)
        readable = [r.rel for r in rows if r.status is not None and not r.status.alias_of]
        records = view.records(readable)
        cost["reads"] += len(rows) + len(readable)
        found.update({row.rel: _entry(row, records.get(row.rel)) for row in rows})
    if stale or set(known) != set(found):
        _write_index(view, found, generation)
    return found


def _entry(row: StepRow, record: dict[str, Any] | None) -> Entry:
    status = row.status
    if status is None:
        return Entry(row.generation, None, str(getattr(row.state, "value", row.state)), ())
    legacy = ((record or {}).get("extra") or {}).get("legacy_digest")
    return Entry(row.generation, status.digest, status.state.value, tuple(made_from(status, record)),
                 legacy if isinstance(legacy, str) else None)


def _read_index(view: PrefixView, cost: dict[str, int]) -> tuple[dict[str, Entry], str | None]:
    """The stored entries and the index's generation (for the CAS); empty when absent or unreadable."""
    cost["reads"] += 1
    try:
        read = view.store.read(INDEX_KEY)
    except StoreError:
        return {}, None
    if read is None:
        return {}, None
    try:
        data = json.loads(read.data)
        if data.get("schema") != SCHEMA:
            return {}, read.generation
        return {rel: Entry.from_json(raw) for rel, raw in data["outputs"].items()}, read.generation
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}, read.generation  # a damaged index is rebuilt, never trusted


def _write_index(view: PrefixView, found: dict[str, Entry], generation: str | None) -> None:
    data = json.dumps({"schema": SCHEMA, "outputs": {rel: e.to_json() for rel, e in sorted(found.items())}},
                      separators=(",", ":")).encode()
    try:
        if generation is None:
            view.store.create_if_absent(INDEX_KEY, data)
        else:
            view.store.replace_if_generation(INDEX_KEY, data, generation)
    except (StoreError, OSError):
        pass  # the index is a saving, not a record: the next walk reads what it lacks


__all__ = ["INDEX_KEY", "Entry", "entries", "tags_read"]
