"""Other prefixes as a verified cache (`--cache-from PREFIX`): which steps the plan copies instead of running.

A step's id is a digest of everything that determines its output, so a SUCCESS status with the same
digest under another prefix names the output this step would make. For each step the plan would
run (new, or failed before; never a --force-run or stale one), each cache-from prefix is asked, in
order, for such a status and its record (whose manifest lists every file with size and checksum).
A step with a source is decided `copy`; the copy itself (executor.engine.transfers.copy_output) checks every
byte against that manifest before anything is committed.

Only what the targets need is copied: walking the plan from the targets down, a step is needed when
it is a target or a dependent will run it as an input; a step not needed whose dependents are copied
(or themselves not needed) is set aside in `Plan.standby`, woken only if a copy falls back to
running. A transfer budget bounds the bytes copied: a copy over it is not made (the step runs, and
its reason says so with the sizes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

from executor.core.errors import ExecutorError, StatusError
from executor.core.graph import Graph, StepNode
from executor.core.legacy_ids import LegacyDigests
from executor.core.plan import Action, Decision, Plan, match_steps
from executor.core.record import State, Status, record_key, status_key
from executor.core.urls import check_prefix_spelling
from executor.engine.prefix import outputs
from executor.engine.run.snapshot import observe

ENV_VAR = "EXECUTOR_CACHE_FROM"
GB = 10**9


class OpenedSource(Protocol):
    """A cache-from prefix as the plan opened it, once (an executor.engine.prefix.prefixes.OpenedPrefix,
    named here by what is read of it: that module imports this package's neighbours)."""

    @property
    def url(self) -> str: ...

    @property
    def store(self) -> Any: ...

    @property
    def fs(self) -> Any: ...


@dataclass(frozen=True)
class CopySource:
    """A verified candidate: the source prefix's SUCCESS status and record for this step's digest."""

    prefix: str
    output_path: str  # the step's output under the source prefix
    run_id: str | None  # the run that made it there
    status: Status
    record: Mapping[str, Any]
    legacy_id: str | None = None  # the step's id of before issue 44 it is held under there (then re-keyed)

    @property
    def files(self) -> list[dict[str, Any]]:
        return list(self.record.get("manifest") or [])

    @property
    def bytes(self) -> int:
        return sum(int(f.get("size") or 0) for f in self.files)

    def describe(self) -> str:
        held = f", under its id of before issue 44 {self.legacy_id}" if self.legacy_id else ""
        return f"{self.prefix} (run {self.run_id or 'unknown'}, {human_bytes(self.bytes)}{held})"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def cache_from_list(given: Sequence[str] | str | None, environ: Mapping[str, str], prefix: str) -> tuple[str, ...]:
    """The cache-from prefixes (normalized, in order): `given` if any, else EXECUTOR_CACHE_FROM
    (comma-separated). The run's own prefix is refused: it cannot be its own cache."""
    if isinstance(given, str):
        given = given.split(",")
    raw = list(given or []) or environ.get(ENV_VAR, "").split(",")
    for p in raw:  # `gs:/bucket` would be a local folder that holds nothing: refused, with the spelling
        if p.strip():
            check_prefix_spelling(p.strip(), "--cache-from" if given else ENV_VAR)
    sources = tuple(dict.fromkeys(outputs.normalize_prefix(p.strip()) for p in raw if p.strip()))
    if outputs.normalize_prefix(prefix) in sources:
        raise ExecutorError(f"--cache-from {prefix}: that is the run's own prefix; name another prefix "
                            f"whose outputs to reuse")
    return sources


def _copyable(decision: Decision, forced: set[str]) -> bool:
    """A step the plan would run because it has no output here (new, or failed): not forced, not stale."""
    status = decision.observed.status
    return (decision.action == Action.RUN and decision.node.digest not in forced
            and (status is None or status.state == State.FAILED))


def find_sources(nodes: Sequence[StepNode], cache_from: Sequence[OpenedSource],
                 legacy: LegacyDigests | None = None) -> dict[str, list[CopySource]]:
    """Per digest, the prefixes (in the given order, each opened once by the caller: executor.api.decide)
    holding a SUCCESS status of that digest and a readable record. With `legacy` (the graph's LegacyDigests), a prefix holding none under the step's id is asked
    for its id of before issue 44 too (a prefix written before ids stopped naming config classes' modules):
    such a source is presented under the new id (executor/engine/run/legacy_carry.py carries a prefix's own)."""
    found: dict[str, list[CopySource]] = {}
    for source in cache_from:
        missing = _sources_in(source.store, source.fs, source.url, nodes, found)
        if legacy is not None and missing:
            _legacy_sources_in(source.store, source.fs, source.url, missing, legacy, found)
    return found


def _sources_in(store: Any, fs: Any, source: str, nodes: Sequence[StepNode],
                found: dict[str, list[CopySource]]) -> list[StepNode]:
    """Add `source`'s copies of `nodes` to `found`; the nodes it holds none of."""
    from executor.engine.run.snapshot import read_snapshot

    snapshot, missing = read_snapshot(store, nodes), []
    for node in nodes:
        status = snapshot[node.digest].status
        record = _record(fs, source, node.output_rel, node.digest) if (
            status is not None and status.state == State.SUCCESS and status.digest == node.digest) else None
        if record is None:
            missing.append(node)
            continue
        output_path = outputs.join(source, (status.alias_of or {}).get("output_rel") or node.output_rel)
        found.setdefault(node.digest, []).append(CopySource(source, output_path, record.get("run_id"), status, record))
    return missing


def _record(fs: Any, source: str, rel: str, digest: str) -> dict[str, Any] | None:
    """The record at `rel` if it is `digest`'s (a status without its record, or another digest's, is no source)."""
    try:
        record = outputs.read_record(fs, outputs.join(source, record_key(rel)))
    except StatusError:
        return None
    return record if record is not None and record.get("digest") == digest else None


def _legacy_sources_in(store: Any, fs: Any, source: str, nodes: Sequence[StepNode], legacy: LegacyDigests,
                       found: dict[str, list[CopySource]]) -> None:
    """`source`'s copies of `nodes` under their ids of before issue 44 (one read_many of those statuses),
    re-keyed to the new ids: the status's digest and inputs, the record's identity and dependencies."""
    from executor.engine.run.legacy_carry import rekeyed_record

    moved = [(n, legacy.step_id(n.digest) if n.output_rel == n.step_id else n.output_rel)  # an override path:
             for n in nodes if legacy.of(n.digest) != n.digest]                              # the same path
    if not moved:
        return
    new_of = legacy.new_digest_of()
    for (node, old_rel), read in zip(moved, store.read_many([status_key(rel) for _, rel in moved])):
        old = observe(read, f"{store.root}/{status_key(old_rel)}").status
        record = _record(fs, source, old_rel, old.digest) if (
            old is not None and old.state == State.SUCCESS and old.digest == legacy.of(node.digest)) else None
        if record is None:
            continue
        old_id = old.step_id
        record = rekeyed_record(record, node, legacy, old_id)
        status = replace(old, digest=node.digest, step_id=node.step_id, inputs={
            new_of.get(d, d): sha for d, sha in old.inputs.items()} if old.inputs else old.inputs)
        output_path = outputs.join(source, (old.alias_of or {}).get("output_rel") or old_rel)
        found.setdefault(node.digest, []).append(
            CopySource(source, output_path, record.get("run_id"), status, record, legacy_id=old_id))


def plan_copies(graph: Graph, plan: Plan, cache_from: Sequence[OpenedSource], *,
                only: str | None = None, force_run: str | None = None, budget_gb: float = 10.0,
                reserved_bytes: int = 0, refused: Mapping[str, str] | None = None) -> Plan:
    """`plan` with `copy` for the steps a cache-from prefix (`cache_from`: opened, in order) holds and the targets need, within the budget
    (of which `reserved_bytes` are already taken: the mirrored inputs and cross-region reads the steps
    that run need). `refused`: digest -> why no prefix's copy of it may be used (executor.tools.taint)."""
    if not cache_from:
        return plan
    forced = set(match_steps(graph, force_run, "--force-run")) if force_run else set()
    refused = refused or {}
    forced |= set(refused)  # not copied, as a --force-run step is not
    candidates = [d.node for d in plan.decisions.values() if _copyable(d, forced)]
    sources = find_sources(candidates, cache_from, LegacyDigests(graph)) if candidates else {}
    targets = set(graph.targets if only is None else match_steps(graph, only, "--only"))
    users: dict[str, list[str]] = {}  # digest -> the planned steps that read its output
    for digest, d in plan.decisions.items():
        for dep in (*d.node.deps, *d.node.weak_deps):
            users.setdefault(dep, []).append(digest)
    decided: dict[str, Decision] = {}
    standby: dict[str, Decision] = {}
    budget, used = budget_gb * GB, reserved_bytes
    reserved = (f", {human_bytes(reserved_bytes)} of it for mirrored inputs and cross-region reads"
                if reserved_bytes else "")
    for digest in reversed(list(plan.decisions)):  # dependents before what they read
        d = plan.decisions[digest]
        if not _copyable(d, forced):
            decided[digest] = replace(d, reason=f"{d.reason}; not copied: {refused[digest]}") if (
                digest in refused and d.action == Action.RUN and refused[digest] not in d.reason) else d
            continue
        readers = [decided.get(u) or standby[u] for u in users.get(digest, ())]
        needed = digest in targets or any(r.action in (Action.RUN, Action.WAIT) and r.node.digest not in standby
                                          for r in readers)
        choice, found = d, sources.get(digest) or []
        if found and needed and used + found[0].bytes > budget:
            choice = replace(d, reason=f"{d.reason}; not copied: {human_bytes(found[0].bytes)} from "
                                       f"{found[0].prefix} would take the transfer budget past "
                                       f"{budget_gb:g} GB ({human_bytes(used)} already planned{reserved}; "
                                       f"--transfer-budget-gb)")
        elif found:
            used += found[0].bytes if needed else 0
            choice = replace(d, action=Action.COPY, reason=f"copy from {found[0].describe()}", sources=tuple(found))
        if not needed and readers:  # every reader is complete, copied or itself not needed
            standby[digest] = replace(choice, reason=f"not needed here ({choice.reason})")
        else:
            decided[digest] = choice
    in_order = list(plan.decisions)  # topological, as the plan
    return Plan({k: decided[k] for k in in_order if k in decided},
                {**plan.standby, **{k: standby[k] for k in in_order if k in standby}})
