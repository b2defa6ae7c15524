"""Adopt: declare a step's new id equivalent to an existing completed output.

Hashing everything re-addresses a step on a cosmetic edit; adopting says "this new id's output
is that old one". It writes, at the new id, a small record (identity, who declared it and why)
and then a SUCCESS status with `alias_of = {step_id, digest, output_rel}` of the old output via
`create_if_absent`. Execution resolves dependents' placeholders through that one hop, the plan
says "succeeded (adopted from …)", and a re-run skips. It refuses when the old output is not
SUCCESS or the new id already has a status; the old output and its record are never touched.
An alias of an alias points straight at the final output (always one hop).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from executor.engine import location
from executor.engine import outputs
from executor.core.errors import ExecutorError
from executor.core.graph import Graph, StepNode
from executor.tools.identity_diff import diff_documents
from executor.core.record import Owner, State, Status, StepRecord, parse_status, record_key, status_key


@dataclass(frozen=True)
class Adoption:
    node: StepNode
    alias_of: dict[str, str]
    differences: list[str]  # identity differences between the old output and the new id
    record_path: str


def pick_node(graph: Graph, name: str) -> StepNode:
    nodes = graph.node_by_name(name)
    if not nodes:
        names = ", ".join(sorted({n.name for n in graph.nodes.values()}))
        raise ExecutorError(f"no step named {name!r} in this experiment; steps are: {names}")
    if len(nodes) > 1:
        ids = ", ".join(n.step_id for n in nodes)
        raise ExecutorError(f"{len(nodes)} steps are named {name!r} ({ids}); name the one to adopt by its step id")
    return nodes[0]


def _relative(prefix: str, ref: str) -> str:
    """An old step given as a step id, an output path relative to the prefix, or a full path."""
    ref = ref.rstrip("/")
    for base in (prefix.rstrip("/"), outputs.normalize_prefix(prefix)):
        if ref.startswith(base + "/"):
            return ref[len(base) + 1:]
    return ref.strip("/")


def adopt(graph: Graph, name: str, from_ref: str, prefix: str, *, reason: str | None, declared_by: dict[str, Any],
          storage_options: dict | None = None, now: float | None = None) -> Adoption:
    """Write the alias. Raises ExecutorError (nothing written) when the adoption is not safe."""
    now = time.time() if now is None else now
    node = pick_node(graph, name)
    store = location.open_location(prefix, storage_options)[0]
    fs = location.open_filesystem(prefix, storage_options)
    old_rel = _relative(prefix, from_ref)

    old_key = status_key(old_rel)
    versioned = store.read(old_key)
    if versioned is None:
        raise ExecutorError(f"--from {from_ref!r}: no status at {prefix}/{old_key}; adopt only a completed output "
                            f"(see `python -m executor status {prefix}/{old_rel}`)")
    old = parse_status(versioned.data, f"{prefix}/{old_key}")
    if old.state != State.SUCCESS:
        raise ExecutorError(f"--from {from_ref!r} is {old.state.value}, not SUCCESS; only a completed output can be "
                            f"adopted")
    if old.alias_of:  # always one hop: adopt what the alias points at
        target = {k: old.alias_of[k] for k in ("step_id", "digest", "output_rel")}
    else:
        target = {"step_id": old.step_id, "digest": old.digest, "output_rel": old_rel}
    if target["digest"] == node.digest:
        raise ExecutorError(f"{node.step_id} already is {target['step_id']}: nothing to adopt")

    new_key = status_key(node.output_rel)
    existing = store.read(new_key)
    if existing is not None:
        state = parse_status(existing.data, f"{prefix}/{new_key}").state.value
        raise ExecutorError(f"{node.step_id} already has a status ({state}) at {prefix}/{new_key}; adopt only "
                            f"declares ids that never ran. Its output stays as it is.")

    old_record = outputs.read_json(fs, outputs.join(prefix, record_key(target["output_rel"]))) or {}
    differences = ([c.render() for c in diff_documents(old_record["identity"], node.identity)]
                   if isinstance(old_record, dict) and "identity" in old_record else [])
    who = f"{declared_by.get('user', '?')}@{declared_by.get('host', '?')}"
    alias_of = {**target, "declared_by": who, "declared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "reason": reason or ""}
    run_id = f"adopt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"
    record = StepRecord(
        step_id=node.step_id, digest=node.digest, name=node.name, identity=node.identity, config=None,
        dependencies=[], provenance={**declared_by, "adopted": True}, result=None, manifest=[],
        timings={"started_at": now, "finished_at": now, "seconds": 0.0}, attempt=0, run_id=run_id,
        extra={"adopted_from": alias_of, "identity_differences": differences})
    record_path = outputs.join(prefix, record_key(node.output_rel))
    outputs.write_json(fs, record_path, record.to_bytes())  # no status yet, so no committed record is replaced
    owner = Owner(run_id=run_id, host=str(declared_by.get("host", "?")), pid=int(declared_by.get("pid", 0)),
                  user=str(declared_by.get("user", "?")))
    status = Status(State.SUCCESS, node.digest, node.step_id, seq=0, attempt=0, owner=owner, written_at=now,
                    started_at=now, alias_of=alias_of)
    if store.create_if_absent(new_key, status.to_bytes()) is None:
        raise ExecutorError(f"{node.step_id} got a status from another runner while adopting; nothing was "
                            f"declared (its own run will replace the adoption record)")
    return Adoption(node, alias_of, differences, record_path)
