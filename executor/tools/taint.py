"""Taint: recall a bad output and everything derived from it.

`<prefix>/taints/<digest>.json` is an append-only list of taint and untaint events (who, when, why;
never deleted). An output is tainted while its last event is a taint and its bytes are the ones
tainted (the status's content digest, when both are known): a re-run that makes different bytes
is a new output. Planning reads `taints/` with one listing (nothing more when it is empty), in this
prefix and in each `--cache-from` prefix; a tainted output and every step downstream of it in the
graph re-run (a new attempt at the same id, the reason in the plan), and a copy from a tainted
source is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from executor.core.errors import ExecutorError, StatusError
from executor.core.graph import Graph
from executor.core.record import Status, parse_status, status_key

TAINT_SCHEMA = 1
TAINTS_DIR = "taints/"
_TRIES = 5


@dataclass(frozen=True)
class TaintEvent:
    action: str  # "taint" | "untaint"
    reason: str
    by: Mapping[str, Any] = field(default_factory=dict)
    at: float = 0.0
    step_id: str | None = None
    content_sha256: str | None = None  # the tainted bytes (the status's content digest), when known


@dataclass(frozen=True)
class Taint:
    """Where a digest stands: its events, oldest first; tainted while the last is a taint."""

    digest: str
    events: tuple[TaintEvent, ...]

    @property
    def tainted(self) -> bool:
        return bool(self.events) and self.events[-1].action == "taint"

    @property
    def last(self) -> TaintEvent:
        return self.events[-1]

    def applies_to(self, status: Status | None) -> bool:
        """Tainted, and `status` (None: no output here) holds the tainted bytes, as far as is known."""
        if not self.tainted:
            return False
        tainted_bytes = self.last.content_sha256
        return status is None or not tainted_bytes or not status.content_sha256 or status.content_sha256 == tainted_bytes


def taint_key(digest: str) -> str:
    return f"{TAINTS_DIR}{digest}.json"


def _parse(digest: str, data: bytes, where: str) -> Taint:
    try:
        raw = json.loads(data)
        if raw["schema"] > TAINT_SCHEMA:
            raise StatusError(f"{where}: taint schema {raw['schema']} is newer than this executor understands; "
                              f"upgrade stepgraph")
        return Taint(digest, tuple(TaintEvent(**e) for e in raw["events"]))
    except StatusError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise StatusError(f"{where}: corrupt taint file ({type(e).__name__}: {e})") from None


def read_taints(store: Any) -> dict[str, Taint]:
    """digest -> its taint history, for every digest ever tainted here: one listing of taints/ (and
    a read of each file it lists; none when it lists nothing)."""
    keys = sorted(k for k in store.list_generations(TAINTS_DIR, ".json") if k.endswith(".json"))
    found: dict[str, Taint] = {}
    for key, read in zip(keys, store.read_many(keys)):
        if read is not None:
            digest = key[len(TAINTS_DIR):-len(".json")]
            found[digest] = _parse(digest, read.data, f"{store.root}/{key}")
    return found


def record_event(store: Any, digest: str, event: TaintEvent) -> Taint:
    """Append `event` to the digest's taint file (created if absent; compare-and-swap, never overwritten)."""
    if not (event.reason or "").strip():
        raise ExecutorError(f"{event.action} {digest[:16]}… needs a reason (--reason \"...\"): it is recorded for "
                            f"everyone who reuses this prefix")
    key = taint_key(digest)
    for _ in range(_TRIES):
        read = store.read(key)
        events = _parse(digest, read.data, f"{store.root}/{key}").events if read is not None else ()
        if event.action == "untaint" and not (events and events[-1].action == "taint"):
            raise ExecutorError(f"{event.step_id or digest} is not tainted; nothing to untaint")
        data = json.dumps({"schema": TAINT_SCHEMA, "digest": digest,
                           "events": [asdict(e) for e in (*events, event)]}, indent=1, sort_keys=True).encode()
        written = (store.create_if_absent(key, data) if read is None
                   else store.replace_if_generation(key, data, read.generation))
        if written is not None:
            return Taint(digest, (*events, event))
    raise ExecutorError(f"the taint file of {digest[:16]}… kept changing while it was written; try again")


def taint_output(store: Any, rel: str, action: str, reason: str, *, by: Mapping[str, Any] | None = None,
                 at: float = 0.0) -> Taint:
    """Taint (or untaint) the output at `rel` under the prefix: its status names the digest and bytes."""
    read = store.read(status_key(rel))
    if read is None:
        raise ExecutorError(f"no output at {store.root}/{rel}; name a step, step id or full digest")
    status = parse_status(read.data, f"{store.root}/{status_key(rel)}")
    event = TaintEvent(action, reason, dict(by or {}), at, status.step_id, status.content_sha256)
    return record_event(store, status.digest, event)


def all_taints(stores: Iterable[Any]) -> dict[str, Taint]:
    """The taints of several prefixes (this one first, then each --cache-from): a digest tainted anywhere is."""
    merged: dict[str, Taint] = {}
    for store in stores:
        for digest, found in read_taints(store).items():
            if found.tainted and digest not in merged:
                merged[digest] = found
    return merged


def under_legacy_ids(graph: Graph, taints: Mapping[str, Taint]) -> dict[str, Taint]:
    """`taints` plus, for each step whose id of before issue 44 (executor/core/legacy_ids.py) is tainted, the
    same taint under its new digest: an output a --cache-from prefix holds under its old id is refused as
    one under the new id would be. Nothing is worked out when there is no taint."""
    if not taints:
        return dict(taints)
    from executor.core.legacy_ids import LegacyDigests

    legacy, found = LegacyDigests(graph), dict(taints)
    for digest in graph.nodes:
        old = legacy.of(digest)
        if old != digest and old in taints and digest not in found:
            found[digest] = taints[old]
    return found


def through_tags(store: Any, graph: Graph, taints: Mapping[str, Taint]) -> dict[str, Taint]:
    """`taints` plus, for each tag the graph reads whose output was made (directly or not) from a
    tainted output, a taint of the tagged digest saying so: the tagged output's lineage up, read from
    its records (only when there are taints and the graph reads tags)."""
    entries = {node.tags[t].digest: node.tags[t] for node in graph.nodes.values() for t in node.tagged
               if node.tags.get(t) is not None}
    if not taints or not entries:
        return dict(taints)
    from executor.engine.prefix.prefix_view import PrefixView
    from executor.tools.lineage import lineage_up

    found = dict(taints)
    for digest, entry in entries.items():
        if digest in found:
            continue
        walked = lineage_up(PrefixView(store), entry.step_id).nodes[1:]
        source = next((n for n in walked if n.digest in taints), None)
        if source is not None:
            last = taints[source.digest].last
            event = TaintEvent("taint", f"made from tainted {source.rel}: {last.reason}", last.by, last.at,
                               entry.step_id)
            found[digest] = Taint(digest, (event,))
    return found


def tainted_steps(graph: Graph, snapshot: Mapping[str, Any], taints: Mapping[str, Taint]) -> dict[str, str]:
    """digest -> why it must not be reused: each step whose output is tainted (an adopted output: its
    original's taint counts), and every step downstream of one (dependencies and tags it reads)."""
    if not taints:
        return {}
    roots: dict[str, tuple[str, str, str]] = {}  # digest -> (how, the tainted step or tag, the taint's reason)
    passes = 2 if any(node.tagged for node in graph.nodes.values()) else 1  # a tag's step may come later
    for _ in range(passes):
        for digest, node in graph.nodes.items():  # topological: dependencies first
            if digest not in roots:
                found = _taint_of(graph, digest, node, snapshot.get(digest), taints, roots)
                if found is not None:
                    roots[digest] = found
    return {digest: f"{how}{what}: {why}" if how != "tainted" else f"tainted: {why}"
            for digest, (how, what, why) in roots.items()}


def _taint_of(graph: Graph, digest: str, node: Any, observed: Any, taints: Mapping[str, Taint],
              roots: Mapping[str, tuple[str, str, str]]) -> tuple[str, str, str] | None:
    status = observed.status if observed is not None else None
    own = [taints.get(digest), taints.get(((status.alias_of or {}).get("digest")) if status else None)]
    direct = next((t for t in own if t is not None and t.applies_to(status)), None)
    if direct is not None:
        return "tainted", node.name, f"{direct.last.reason} ({_who(direct.last)})"
    upstream = next((d for d in (*node.deps, *node.weak_deps) if d in roots), None)
    if upstream is not None:
        return "derived from tainted ", _root(graph, upstream, roots), roots[upstream][2]
    for tag in node.tagged:  # a tagged output: tainted itself, or (in this graph) made from a tainted one
        entry = node.tags.get(tag)
        found = taints.get(entry.digest) if entry is not None else None
        if found is not None and found.tainted:
            return "reads tag ", f"{tag}, which is tainted", f"{found.last.reason} ({_who(found.last)})"
        if entry is not None and entry.digest in roots:
            return "reads tag ", f"{tag}, which is tainted", roots[entry.digest][2]
    return None


def _root(graph: Graph, digest: str, roots: Mapping[str, tuple[str, str, str]]) -> str:
    """The name of the tainted step (or tag) `digest` derives from."""
    how, what, _ = roots[digest]
    return graph.nodes[digest].name if how == "tainted" else what


def _who(event: TaintEvent) -> str:
    user = (event.by or {}).get("user") or "unknown"
    return f"by {user}"
