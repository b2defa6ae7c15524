"""Adopt: declare a step's new id equivalent to an existing completed output.

Hashing everything re-addresses a step on a cosmetic edit; adopting says "this new id's output
is that old one". It writes, at the new id, a small record (identity, who declared it and why)
and then a SUCCESS status with `alias_of = {step_id, digest, output_rel}` of the old output via
`create_if_absent`. Execution resolves dependents' placeholders through that one hop, the plan
says "succeeded (adopted from …)", and a re-run skips. It refuses when the old output is not
SUCCESS or the new id already has a status; the old output and its record are never touched.
An alias of an alias points straight at the final output (always one hop).

A reason is required. A source of another step name or config type is refused unless forced
(with the reason). `dry_run` checks everything and writes nothing. `adopt_chain` also adopts each
dependent whose new id differs only through the adopted step: its earlier output that consumed the
adopted one, found by rewriting the new identity's dependency digests to the adopted ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from executor.engine.prefix.prefixes import OpenedPrefix
from executor.engine.prefix import outputs
from executor.core.errors import ExecutorError, StatusError
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


def _kind(identity: dict[str, Any] | None) -> str | None:
    """The config's class name (without its module: moving a class is no change of kind)."""
    config = (identity or {}).get("config")
    kind = config.get("dataclass") if isinstance(config, dict) else None
    return kind.rsplit(".", 1)[-1] if isinstance(kind, str) else None


def adopt(graph: Graph, name: str, from_ref: str, opened: OpenedPrefix, *, reason: str | None,
          declared_by: dict[str, Any], now: float | None = None, force: bool = False,
          dry_run: bool = False) -> Adoption:
    """Write the alias under the opened prefix. Raises ExecutorError (nothing written) when the
    adoption is not safe."""
    now = time.time() if now is None else now
    node = pick_node(graph, name)
    return _adopt_node(node, from_ref, opened, reason=reason, declared_by=declared_by, now=now, force=force,
                       dry_run=dry_run)


def _adopt_node(node: StepNode, from_ref: str, opened: OpenedPrefix, *, reason: str | None,
                declared_by: dict[str, Any], now: float, force: bool, dry_run: bool) -> Adoption:
    prefix, store, fs = opened.url, opened.store, opened.filesystem
    old, target = _completed_output(store, prefix, from_ref, node)
    new_key = status_key(node.output_rel)
    existing = store.read(new_key)
    if existing is not None:
        state = parse_status(existing.data, f"{prefix}/{new_key}").state.value
        raise ExecutorError(f"{node.step_id} already has a status ({state}) at {prefix}/{new_key}; adopt only "
                            f"declares ids that never ran. Its output stays as it is.")
    old_record = outputs.read_record(fs, outputs.join(prefix, record_key(target["output_rel"]))) or {}
    old_identity = old_record.get("identity")
    differences = [c.render() for c in diff_documents(old_identity, node.identity)] if old_identity else []
    _refuse_another_steps_output(node, target, old_identity, force)
    if not (reason or "").strip():
        raise ExecutorError("adopt needs --reason TEXT: why the two ids name the same output (it is recorded)")
    if dry_run:
        return Adoption(node, {**target, "reason": reason}, differences, "")
    who = f"{declared_by.get('user', '?')}@{declared_by.get('host', '?')}"
    alias_of = {**target, "declared_by": who, "declared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "reason": reason or ""}
    record_path = _declare(store, fs, prefix, node, old, alias_of, differences, declared_by, now)
    return Adoption(node, alias_of, differences, record_path)


def _completed_output(store: Any, prefix: str, from_ref: str, node: StepNode) -> tuple[Status, dict[str, str]]:
    """The SUCCESS status `--from` names, and what it is (an alias's target: always one hop)."""
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
    if old.alias_of:
        target = {k: old.alias_of[k] for k in ("step_id", "digest", "output_rel")}
    else:
        target = {"step_id": old.step_id, "digest": old.digest, "output_rel": old_rel}
    if target["digest"] == node.digest:
        raise ExecutorError(f"{node.step_id} already is {target['step_id']}: nothing to adopt")
    return old, target


def _refuse_another_steps_output(node: StepNode, target: dict[str, str], old_identity: Any, force: bool) -> None:
    old_name = target["step_id"].rsplit("-", 1)[0]
    mismatch = []
    if old_name != node.name:
        mismatch.append(f"it is an output of step {old_name!r}, not {node.name!r}")
    if old_identity and _kind(old_identity) != _kind(node.identity):
        mismatch.append(f"its config is a {_kind(old_identity)}, not a {_kind(node.identity)}")
    if mismatch and not force:
        raise ExecutorError(f"refusing to adopt {target['step_id']} as {node.step_id}: {' and '.join(mismatch)}. "
                            f"If they really are the same output, pass --force with a --reason")


def _declare(store: Any, fs: Any, prefix: str, node: StepNode, old: Status, alias_of: dict[str, Any],
             differences: list[str], declared_by: dict[str, Any], now: float) -> str:
    """Write the adoption's record, then its SUCCESS status (only where no status exists)."""
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
                    started_at=now, alias_of=alias_of, content_sha256=old.content_sha256)
    if store.create_if_absent(status_key(node.output_rel), status.to_bytes()) is None:
        raise ExecutorError(f"{node.step_id} got a status from another runner while adopting; nothing was "
                            f"declared (its own run will replace the adoption record)")
    return record_path


def adopt_chain(graph: Graph, name: str, from_ref: str, opened: OpenedPrefix, *, reason: str | None,
                declared_by: dict[str, Any], now: float | None = None,
                force: bool = False, dry_run: bool = False) -> tuple[list[Adoption], list[str]]:
    """Adopt `name`, then every dependent whose earlier output consumed the adopted ones.
    Returns (adoptions, notes on dependents that could not be adopted and why)."""
    import json

    now = time.time() if now is None else now
    first = adopt(graph, name, from_ref, opened, reason=reason, declared_by=declared_by, now=now, force=force,
                  dry_run=dry_run)
    adoptions, notes = [first], []
    old_digest = {first.node.digest: first.alias_of["digest"]}  # new digest -> the digest it now stands for
    prefix, store, fs = opened.url, opened.store, opened.filesystem
    rels = list(opened.view.list_steps())
    for node in graph.nodes.values():  # topological order: a dependent after what it depends on
        if node.digest in old_digest or not any(d in old_digest for d in node.deps):
            continue
        expected = json.dumps(node.identity, sort_keys=True)
        for new, old in old_digest.items():
            expected = expected.replace(new, old)
        found = None
        for rel in (r for r in rels if r.rsplit("-", 1)[0] == node.name):
            try:
                record = outputs.read_record(fs, outputs.join(prefix, record_key(rel)))
            except StatusError:
                continue  # an unreadable record cannot vouch for an output
            if record is not None and json.dumps(record.get("identity"), sort_keys=True) == expected:
                versioned = store.read(status_key(rel))
                if versioned and parse_status(versioned.data, rel).state == State.SUCCESS:
                    found = rel
                    break
        if found is None:
            notes.append(f"{node.name}: no earlier output consumed the adopted one with an otherwise identical "
                         f"identity; it will run")
            continue
        try:
            adoption = _adopt_node(node, found, opened, reason=f"{reason} (dependent of {first.node.name})",
                                   declared_by=declared_by, now=now, force=False, dry_run=dry_run)
        except ExecutorError as e:
            notes.append(f"{node.name}: not adopted: {e}")
            continue
        adoptions.append(adoption)
        old_digest[node.digest] = adoption.alias_of["digest"]
    return adoptions, notes
