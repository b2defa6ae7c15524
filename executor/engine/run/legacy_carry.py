"""Carrying outputs made under pre-issue-44 ids over to today's ids, automatically, when planning.

Ids no longer name the module of config classes (core/legacy_ids.py), so a prefix written before
holds each output under its old id. Planning calls `carry_over` with its snapshot: only the steps
with no status at their new id (those that would otherwise run) get their old id worked out, and
only the ones whose old id differs are read, in one read_many. Each old id with a SUCCESS status
is adopted as `executor adopt` would: a record at the new id (who, when, "migrated from legacy id")
then a SUCCESS status with `alias_of` the old output, written with create_if_absent, so two
runners make one decision. Dependents resolve their inputs through the alias; the status keeps
the old one's content digest, function fingerprint and consumed inputs (re-keyed to the new
digests), so staleness and drift checks go on as before. A step with `override_output_path` has the
same path under both ids: its SUCCESS status is re-keyed in place instead (its record, then its status
by CAS against the generation planned from), never aliased (the alias would name its own output). A
dry run (`write=False`) decides the same and writes nothing. Old outputs' files are never touched.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from executor.core.errors import GraphError
from executor.core.graph import Graph, StepNode
from executor.core.legacy_ids import LegacyDigests
from executor.core.plan import NOT_OBSERVED, Observed
from executor.core.record import Owner, State, Status, StepRecord, record_key, status_key, to_json_bytes
from executor.engine.prefix import outputs
from executor.engine.run.snapshot import observe

REASON = "migrated from its legacy id: ids no longer name the module that defines a config class (issue 44)"


def carry_over(graph: Graph, snapshot: dict[str, Observed], store: Any, fs: Any, prefix: str, *,
               write: bool, now: float | None = None) -> dict[str, Observed]:
    """`snapshot` with each status-less step whose legacy id holds a SUCCESS adopted from it."""
    now = time.time() if now is None else now
    snapshot = _carry_overrides(graph, snapshot, store, fs, prefix, write=write, now=now)
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
    owner = None
    for (node, old_id), versioned in zip(moved, found):
        old = observe(versioned, f"{store.root}/{status_key(old_id)}").status
        if old is None or old.state != State.SUCCESS or old.digest != legacy.of(node.digest):
            continue
        owner = owner or _owner(now)
        status = _adopted_status(node, old, old_id, new_digest_of, owner, now)
        carried[node.digest] = _declare(store, fs, prefix, node, status, now) if write else Observed(status)
    return carried


def _carry_overrides(graph: Graph, snapshot: dict[str, Observed], store: Any, fs: Any, prefix: str, *,
                     write: bool, now: float) -> dict[str, Observed]:
    """An override_output_path is the same path under both ids: its SUCCESS status of before is carried
    over in place (no alias: it would name its own output), re-keyed to the new digest by a CAS against
    the generation planned from, after its record is re-keyed. Only steps whose status holds another
    digest are looked at: the hot path stays. Any other state of before is named, with the way on."""
    other = [n for d, n in graph.nodes.items() if n.output_rel != n.step_id
             and (status := (snapshot.get(d) or NOT_OBSERVED).status) is not None and status.digest != d]
    if not other:
        return snapshot
    legacy, carried, owner = LegacyDigests(graph), dict(snapshot), None
    for node in other:
        held = snapshot[node.digest].status
        if held.digest != legacy.of(node.digest):
            continue  # not the step's digest of before: left to the plan's clash error
        if held.state != State.SUCCESS:
            raise GraphError(
                f"step {node.name!r}: its override_output_path {node.output_rel!r} holds a {held.state.value} "
                f"status of the step's id of before ids stopped naming the module of config classes (digest "
                f"{held.digest[:16]}…; docs/editing-code.md, \"Moving code keeps ids\"); only a SUCCESS is carried "
                f"over: delete its status to run it again "
                f"(`uv run stepgraph repair --delete-status {node.output_rel}`)")
        owner = owner or _owner(now)
        status = _in_place_status(node, held, legacy.new_digest_of(), owner, now)
        carried[node.digest] = (_migrate_in_place(store, fs, prefix, node, snapshot[node.digest], status, legacy)
                                if write else Observed(status))
    return carried if owner is not None else snapshot


def _in_place_status(node: StepNode, held: Status, new_digest_of: dict[str, str], owner: Owner, now: float) -> Status:
    alias_of = held.alias_of if held.alias_of and held.alias_of.get("output_rel") != node.output_rel else None
    inputs = ({new_digest_of.get(d, d): sha for d, sha in held.inputs.items()} if held.inputs else held.inputs)
    return replace(held, digest=node.digest, step_id=node.step_id, seq=held.seq + 1, owner=owner, written_at=now,
                   alias_of=alias_of, inputs=inputs)


def _migrate_in_place(store: Any, fs: Any, prefix: str, node: StepNode, planned: Observed, status: Status,
                      legacy: LegacyDigests) -> Observed:
    """The re-keyed record, then the status by CAS against the generation planned from; the status there
    after (another runner's, when it migrated first: the same decision)."""
    key, path = status_key(node.output_rel), outputs.join(prefix, record_key(node.output_rel))
    record = outputs.read_record(fs, path)
    if record is None or record.get("digest") not in (planned.status.digest, node.digest):
        raise GraphError(f"step {node.name!r}: its override_output_path {node.output_rel!r} holds a status of the "
                         f"step's id of before but no record of it ({path}); delete its status to make it again "
                         f"(`uv run stepgraph repair --delete-status {node.output_rel}`)")
    old_id = (record.get("extra") or {}).get("legacy_id") or planned.status.step_id
    outputs.write_json(fs, path, to_json_bytes(rekeyed_record(record, node, legacy, old_id)))
    generation = store.replace_if_generation(key, status.to_bytes(), planned.generation)
    if generation is not None:
        return Observed(status, generation)
    return observe(store.read(key), f"{store.root}/{key}")


def rekeyed_record(record: dict[str, Any], node: StepNode, legacy: LegacyDigests, old_id: str) -> dict[str, Any]:
    """A record made under a step's id of before, under its new id: its digest, step id and identity, and its
    dependencies' digests and ids (those of this graph); `extra.legacy_id` and `legacy_digest` name the old
    ones (lineage finds what consumed the output under its old digest through them)."""
    new_of = legacy.new_digest_of()

    def dependency(dep: dict[str, Any]) -> dict[str, Any]:
        new = new_of.get(dep.get("digest"))
        if new not in legacy.graph.nodes:
            return dep
        return {**dep, "digest": new, "step_id": legacy.graph.nodes[new].step_id}

    extra = dict(record.get("extra") or {})
    old_digest = record.get("digest") if record.get("digest") != node.digest else extra.get("legacy_digest")
    return {**record, "step_id": node.step_id, "digest": node.digest, "identity": node.identity,
            "dependencies": [dependency(d) if isinstance(d, dict) else d for d in record.get("dependencies") or []],
            "extra": {**extra, "legacy_id": old_id, "legacy_digest": old_digest, "migration": "legacy-ids"}}


def _owner(now: float) -> Owner:
    from executor.engine.run.provenance import user_and_host

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
