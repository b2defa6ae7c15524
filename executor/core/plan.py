"""Planning: one decision and a reason per step, from a snapshot of statuses. Pure.

The same plan drives execution and is what --dry-run prints.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from executor.core.errors import GraphError
from executor.core.gc_pause import gc_paused
from executor.core.graph import Graph, StepNode
from executor.core.record import State, Status


class Action(enum.StrEnum):  # str() is the word --dry-run shows: "run"
    RUN = "run"
    SKIP = "skip"
    WAIT = "wait"
    BLOCKED = "blocked"
    STOP = "stop"  # previous attempt failed and --force-failed is off
    COPY = "copy"  # a cache-from prefix holds this step's output (same digest, SUCCESS): copied, checked


@dataclass(frozen=True, slots=True)  # slots: one per step of a plan; no dict each (less memory to fault in)
class Observed:
    """What a status read found: the parsed status (None if absent) and its generation."""

    status: Status | None
    generation: str | None = None


NOT_OBSERVED = Observed(None)  # no status: one instance for every such step (frozen, so shared safely)


@dataclass(frozen=True)
class PlanOptions:
    force_failed: bool = True
    force_run: str | None = None  # regex over step names: re-run even when SUCCESS
    only: str | None = None  # regex over step names: run these plus what they need
    now: float | None = None  # wall clock, for heartbeat ages shown to people
    # --drift strict: digest -> why a succeeded step re-runs ("code changed: helpers.transform")
    code_changed: Mapping[str, str] = field(default_factory=dict)
    # digest -> why a succeeded step is not reused: its output, or one it derives from, is tainted
    # (executor.tools.taint); it re-runs, a new attempt at the same id
    tainted: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)  # slots, as Observed
class Decision:
    node: StepNode
    action: Action
    reason: str
    observed: Observed = NOT_OBSERVED
    recheck: tuple[str, ...] = ()  # SKIP for now; dependencies (digests) that re-run in this plan:
    #                                if the output one of them commits differs from what this step
    #                                consumed, the step re-runs once they finish (staleness by content)
    sources: tuple = ()  # COPY: where from, best first (executor.engine.transfers.cache_from.CopySource)


@dataclass(frozen=True)
class Plan:
    decisions: dict[str, Decision]  # by digest, topological order; only selected steps
    # Steps not needed while their dependents are copied (--cache-from); a copy that falls back to
    # running wakes the ones it needs.
    standby: dict[str, Decision] = field(default_factory=dict)
    # The mirrored inputs of the steps it runs, by logical URL (executor.engine.transfers.mirror.MirrorInput):
    # complete under the prefix, or where their copy comes from and its size.
    mirrors: dict[str, Any] = field(default_factory=dict)
    # The cross-region survey of the steps it runs, (reads, undetermined), when planning made one
    # (executor.engine.transfers.regions.survey): their bytes were reserved in the transfer budget before copies.
    cross_region: tuple | None = None

    def by_action(self, action: Action) -> list[Decision]:
        return [d for d in self.decisions.values() if d.action == action]

    @property
    def needs_runner(self) -> bool:
        return any(d.action in (Action.RUN, Action.WAIT, Action.COPY) for d in self.decisions.values())


def match_steps(graph: Graph, pattern: str, flag: str) -> list[str]:
    """Digests of the steps `pattern` names: an exact name or step id selects exactly those steps
    (`isoflop/eval-3e+10-d32` is a name, though `+` is a regex quantifier); otherwise it is a regex
    searched in each name. Matching nothing, or a bad regex, is a GraphError listing the names."""
    exact = [d for d, n in graph.nodes.items() if pattern in (n.name, n.step_id)]
    if exact:
        return exact
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise GraphError(f"{flag} {pattern!r} names no step and is not a valid regular expression ({e}); "
                         f"quote a name exactly, or escape regex characters") from None
    matched = [d for d, n in graph.nodes.items() if compiled.search(n.name)]
    if not matched:
        names = ", ".join(sorted(n.name for n in graph.nodes.values()))
        raise GraphError(f"{flag} {pattern!r} matches no step; steps are: {names}")
    return matched


def select(graph: Graph, only: str | None) -> list[str]:
    """Digests to consider: the targets' closure, or the --only matches' closure."""
    matched = graph.targets if only is None else match_steps(graph, only, "--only")
    wanted = graph.closure(matched)
    if len(wanted) == len(graph.nodes):  # every step (a whole experiment's targets): in order already
        return list(graph.nodes)
    return [d for d in graph.nodes if d in wanted]


_NOT_RUNNING = (Action.BLOCKED, Action.STOP)  # a dependency decided so blocks its dependents


def _succeeded(graph: Graph, node: StepNode, status: Status, decisions: dict[str, Decision],
               snapshot: dict[str, Observed], observed: Observed) -> Decision:
    """SKIP, unless a dependency's committed output is no longer the one this output consumed."""
    consumed = status.inputs or {}  # statuses written before content tracking have none: trusted
    if not consumed:
        return Decision(node, Action.SKIP, _skip_reason(graph, status, ()), observed)
    rerunning = []
    for dep in node.deps:
        if dep not in consumed:
            continue
        dep_decision = decisions.get(dep)
        if dep_decision is not None and (dep_decision.action == Action.RUN or dep_decision.recheck):
            rerunning.append(dep)
            continue
        dep_status = (dep_decision.observed if dep_decision else snapshot.get(dep) or NOT_OBSERVED).status
        now_there = dep_status.content_sha256 if dep_status is not None else None
        if now_there is not None and now_there != consumed[dep]:
            return Decision(node, Action.RUN, f"stale: dependency {graph.nodes[dep].name} was re-run after this "
                                              f"output was made, and its output changed", observed)
    return Decision(node, Action.SKIP, _skip_reason(graph, status, rerunning), observed, tuple(rerunning))


def _skip_reason(graph: Graph, status: Status, rerunning: Sequence[str]) -> str:
    if not (rerunning or status.alias_of or status.copied_from):
        return "succeeded"
    alias = f" (adopted from {status.alias_of['step_id']})" if status.alias_of else ""
    if status.alias_of and status.alias_of.get("cut_off"):  # an early cutoff (executor.engine.run.cutoff)
        alias = f" ({status.alias_of['cut_off']}; output of {status.alias_of['step_id']})"
    alias += f" (copied from {status.copied_from})" if status.copied_from else ""
    if rerunning:
        names = ", ".join(graph.nodes[d].name for d in rerunning)
        return f"succeeded{alias}; re-run if {names} commits a different output"
    return f"succeeded{alias}"


def describe_owner(status: Status, now: float | None) -> str:
    owner = status.owner
    who = f"{owner.host} pid {owner.pid} (run {owner.run_id})" if owner else "an unknown runner"
    age = f", heartbeat {max(0.0, now - status.written_at):.0f}s ago" if now is not None else ""
    return f"lease held by {who}{age}"


def plan_steps(graph: Graph, snapshot: dict[str, Observed], options: PlanOptions) -> Plan:
    with gc_paused():
        return _plan_steps(graph, snapshot, options)


def _plan_steps(graph: Graph, snapshot: dict[str, Observed], options: PlanOptions) -> Plan:
    selected = select(graph, options.only)
    forced = set(match_steps(graph, options.force_run, "--force-run")) if options.force_run else set()
    if options.force_run and not forced & set(selected):
        raise GraphError(f"--force-run {options.force_run!r} matches no step selected by --only {options.only!r}")
    decisions: dict[str, Decision] = {}
    not_running: set[str] = set()  # the digests decided BLOCKED or STOP so far
    for digest in selected:
        node = graph.nodes[digest]
        observed = snapshot.get(digest) or NOT_OBSERVED
        status = observed.status
        if status is not None and status.digest != digest:
            raise GraphError(
                f"step {node.name!r}: {node.output_rel} holds a status for digest {status.digest[:16]}… "
                f"but this step's digest is {digest[:16]}… (a 48-bit id collision, or a hand-made "
                f"override_output_path clash); refusing to touch it")
        failed_dep = None
        if not_running:
            for dep in node.deps:
                if dep in not_running:
                    failed_dep = decisions[dep]
                    break
        if failed_dep is not None and not (status and status.state == State.SUCCESS):
            root = failed_dep.node.name
            decision = Decision(node, Action.BLOCKED, f"dependency {root} "
                                + ("failed" if failed_dep.action == Action.STOP else "is blocked"), observed)
        elif status is None:
            decision = Decision(node, Action.RUN, "new: no previous attempt", observed)
        elif status.state == State.SUCCESS:
            if digest in forced:
                decision = Decision(node, Action.RUN, "--force-run matches: re-running a succeeded step", observed)
            elif digest in options.tainted:
                decision = Decision(node, Action.RUN, options.tainted[digest], observed)
            elif digest in options.code_changed:
                decision = Decision(node, Action.RUN, options.code_changed[digest], observed)
            else:
                decision = _succeeded(graph, node, status, decisions, snapshot, observed)
        elif status.state == State.RUNNING:
            decision = Decision(node, Action.WAIT, "running elsewhere: " + describe_owner(status, options.now),
                                observed)
        elif options.force_failed:
            decision = Decision(node, Action.RUN, f"previous attempt failed: {status.error or 'unknown error'}",
                                observed)
        else:
            decision = Decision(node, Action.STOP, f"failed: {status.error or 'unknown error'} "
                                "(--force-failed false leaves it)", observed)
        decisions[digest] = decision
        if decision.action in _NOT_RUNNING:
            not_running.add(digest)
    return _set_aside_upstream_of_copies(graph, decisions, options.only, forced)


def _set_aside_upstream_of_copies(graph: Graph, decisions: dict[str, Decision], only: str | None,
                                  forced: set[str]) -> Plan:
    """An output copied here by --cache-from was made elsewhere, from inputs elsewhere: the steps it
    was made from need not be made here. A step that would run because it has no output here (new,
    or failed before), is not wanted (a target, an --only match, --force-run) and is read only by
    such copies that stay complete (or by steps set aside themselves) goes to Plan.standby ("not
    needed here"). Any other missing step runs, as ever (`repair --delete-status` makes a step re-run)."""
    if not any(d.action is Action.SKIP and d.observed.status.copied_from for d in decisions.values()):
        return Plan(decisions)  # no copy here: nothing to set aside (a first run, a no-op re-run)
    aside = {digest for digest, d in decisions.items()
             if d.action == Action.RUN and digest not in forced
             and (d.observed.status is None or d.observed.status.state == State.FAILED)}
    if aside:
        wanted = set(graph.targets if only is None else match_steps(graph, only, "--only"))
        aside = _read_only_by_copies(decisions, aside - wanted)
    if not aside:
        return Plan(decisions)
    kept, standby = {}, {}
    for digest, d in decisions.items():
        if digest in aside:
            standby[digest] = replace(d, reason=f"not needed here ({d.reason})")
        elif d.recheck and set(d.recheck) & aside:  # nothing to wait for from a set-aside step
            recheck = tuple(r for r in d.recheck if r not in aside)
            kept[digest] = replace(d, recheck=recheck, reason=_skip_reason(graph, d.observed.status, recheck))
        else:
            kept[digest] = d
    return Plan(kept, standby)


def _read_only_by_copies(decisions: dict[str, Decision], candidates: set[str]) -> set[str]:
    """The candidates every reader of which is a skipped copy with nothing to re-check but
    candidates (a re-check could re-run it, and it would read them), or itself such a candidate."""
    readers: dict[str, list[str]] = {}
    for digest, d in decisions.items():
        for dep in (*d.node.deps, *d.node.weak_deps):
            readers.setdefault(dep, []).append(digest)
    aside = candidates & readers.keys()  # a step no planned step reads is wanted for itself
    changed = bool(aside)
    while changed:  # readers first (reverse topological order); repeated until nothing changes
        changed = False
        for digest in reversed(decisions):
            if digest in aside and not all(r in aside or _copy_staying_complete(decisions[r], aside)
                                           for r in readers[digest]):
                aside.discard(digest)
                changed = True
    return aside


def _copy_staying_complete(decision: Decision, aside: set[str]) -> bool:
    status = decision.observed.status
    return (decision.action == Action.SKIP and status is not None and status.copied_from is not None
            and set(decision.recheck) <= aside)
