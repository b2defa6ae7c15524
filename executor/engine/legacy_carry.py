"""Carrying outputs made under pre-issue-44 ids over to today's ids, automatically, when planning.

Ids no longer name the module of config classes (core/legacy_ids.py), so a prefix written before
holds each output under its old id. Planning calls `carry_over` with its snapshot: only the steps
with no status at their new id (those that would otherwise run) get their old id worked out, and
only the ones whose old id differs are read, in one read_many. Each old id with a SUCCESS status
is adopted as `executor adopt` would: a record at the new id (who, when, "migrated from legacy id")
then a SUCCESS status with `alias_of` the old output, written with create_if_absent, so two
runners make one decision. Dependents resolve their inputs through the alias; the status keeps
the old one's content digest, function fingerprint and consumed inputs (re-keyed to the new
digests), so staleness and drift checks go on as before. A dry run (`write=False`) decides the
same and writes nothing. Old outputs are never touched.
"""

from __future__ import annotations

import time
from typing import Any

from executor.core.errors import GraphError
from executor.core.graph import Graph, StepNode
from executor.core.legacy_ids import LegacyDigests
from executor.core.plan import NOT_OBSERVED, Observed
from executor.core.record import Owner, State, Status, StepRecord, record_key, status_key
from executor.engine import outputs
from executor.engine.snapshot import observe

REASON = "migrated from its legacy id: ids no longer name the module that defines a config class (issue 44)"


def carry_over(graph: Graph, snapshot: dict[str, Observed], store: Any, fs: Any, prefix: str, *,
               write: bool, now: float | None = None) -> dict[str, Observed]:
    """`snapshot` with each status-less step whose legacy id holds a SUCCESS adopted from it."""
    _refuse_overrides_of_before(graph, snapshot)
    missing = [n for d, n in graph.nodes.items() if (snapshot.get(d) or NOT_OBSERVED).status is None
               and n.output_rel == n.step_id]  # an override_output_path is the same path under both ids
    if not missing:
        return snapshot
    legacy = LegacyDigests(graph)
    moved = [(n, legacy.step_id(n.digest)) for n in missing if legacy.of(n.digest) != n.digest]
    if not moved:
        return snapshot
    found = list(store.read_many([status_key(old_id) for _, old_id in moved]))
    carried = dict(snapshot)
    new_digest_of = legacy.new_digest_of()
    now = time.time() if now is None else now
    owner = None
    for (node, old_id), versioned in zip(moved, found):
        old = observe(versioned, f"{store.root}/{status_key(old_id)}").status
        if old is None or old.state != State.SUCCESS or old.digest != legacy.of(node.digest):
            continue
        owner = owner or _owner(now)
        status = _adopted_status(node, old, old_id, new_digest_of, owner, now)
        carried[node.digest] = _declare(store, fs, prefix, node, status, now) if write else Observed(status)
    return carried


def _refuse_overrides_of_before(graph: Graph, snapshot: dict[str, Observed]) -> None:
    """An override_output_path is the same path under both ids, so it cannot be carried over by an
    alias: its status holds the old digest. Say exactly that (not "an id collision"), and what to do.
    Only steps whose status holds another digest are looked at: the hot path stays."""
    other = [n for d, n in graph.nodes.items() if n.output_rel != n.step_id
             and (status := (snapshot.get(d) or NOT_OBSERVED).status) is not None and status.digest != d]
    legacy = LegacyDigests(graph) if other else None
    for node in other:
        held = snapshot[node.digest].status.digest
        if held == legacy.of(node.digest):
            raise GraphError(
                f"step {node.name!r}: its override_output_path {node.output_rel!r} holds an output made under "
                f"the step's id of before ids stopped naming the module of config classes (digest "
                f"{held[:16]}…; docs/editing-code.md, \"Moving code keeps ids\"). An override path cannot be "
                f"carried over to the new id yet: delete its status to make it again (`uv run stepgraph repair "
                f"--delete-status {node.output_rel}`), or keep this prefix on the previous stepgraph")


def _owner(now: float) -> Owner:
    from executor.engine.provenance import user_and_host

    who = user_and_host()
    return Owner(run_id=f"migrate-ids-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}", host=str(who["host"]),
                 pid=int(who["pid"]), user=str(who["user"]))


def _adopted_status(node: StepNode, old: Status, old_id: str, new_digest_of: dict[str, str], owner: Owner,
                    now: float) -> Status:
    target = (
        {k: old.alias_of[k] for k in ("step_id", "digest", "output_rel")} if old.alias_of  # always one hop
        else {"step_id": old.step_id, "digest": old.digest, "output_rel": old_id})
    alias_of = {**target, "declared_by": f"{owner.user}@{owner.host} (legacy id migration)",
                "declared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "reason": REASON}
    inputs = ({new_digest_of[d]: sha for d, sha in old.inputs.items() if d in new_digest_of}
              if old.inputs else old.inputs)
    return Status(State.SUCCESS, node.digest, node.step_id, seq=0, attempt=0, owner=owner, written_at=now,
                  started_at=now, alias_of=alias_of, function_sha256=old.function_sha256,
                  content_sha256=old.content_sha256, inputs=inputs)


def _declare(store: Any, fs: Any, prefix: str, node: StepNode, status: Status, now: float) -> Observed:
    """Write the adoption's record, then its status where none exists; the status now there."""
    who = {"user": status.owner.user, "host": status.owner.host, "pid": status.owner.pid} if status.owner else {}
    record = StepRecord(
        step_id=node.step_id, digest=node.digest, name=node.name, identity=node.identity, config=None,
        dependencies=[], result=None, manifest=[], provenance={"adopted": True, "migration": "legacy-ids", **who},
        timings={"started_at": now, "finished_at": now, "seconds": 0.0}, attempt=0,
        run_id=status.owner.run_id if status.owner else "migrate-ids",
        extra={"adopted_from": status.alias_of,
               "identity_differences": ["config: class names without their module (issue 44)"]})
    key = status_key(node.output_rel)
    there = store.read(key)
    if there is not None:  # another runner got here since the snapshot: its status (and record) stand
        return observe(there, f"{store.root}/{key}")
    outputs.write_json(fs, outputs.join(prefix, record_key(node.output_rel)), record.to_bytes())
    generation = store.create_if_absent(key, status.to_bytes())
    if generation is not None:
        return Observed(status, generation)
    return observe(store.read(key), f"{store.root}/{key}")  # another runner decided first: its status stands
