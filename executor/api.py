"""The Python API: plan, run and materialize steps from a program or a notebook.

`executor_main` (executor/cli.py) is flags -> `Options` -> these functions -> an exit code. Here
nothing exits the process: a usage or config mistake raises ExecutorError, a step that did not
succeed is a status in the returned result (or StepFailed, from `materialize` and
`RunResult.raise_on_failure`). Nothing is printed either: a call reports through typed events
(executor/engine/events.py) to the `subscribers` it is given; the command line subscribes its
console view. Every call works from any thread and leaves no Ray cluster it
started, and no lease or heartbeat thread, behind when it returns; signal handlers, where the
run installs any, belong on the main thread only (signal.signal raises elsewhere).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional

from executor.core.errors import ExecutorError
from executor.core.exit_codes import ExitCode, for_signal
from executor.core.frozen import new_frozen
from executor.core.gc_pause import gc_paused
from executor.core.graph import Graph, build_graph
from executor.core.plan import Action, Decision, Plan, PlanOptions, plan_steps
from executor.core.outcome import Outcome, outcome_of_action
from executor.core.record import Owner
from executor.core.step import ExecutorStep, Resources
from executor.engine.prefix import outputs
from executor.engine.events import Events, PlanMade, RunFinished, RunStarted, Subscriber
from executor.core.locations import Storage
from executor.core.urls import protocol_of
from executor.engine.prefix.prefixes import OpenedPrefix, open_given, open_prefix
from executor.engine.run.legacy_carry import carry_over
from executor.engine.run.snapshot import read_snapshot


@dataclass(frozen=True)
class Options:
    """How to plan and run; the same meaning as the executor flags of the same names."""

    # None: env EXECUTOR_PREFIX, else cache/ in the script's project (absolute). An OpenedPrefix
    # (executor.engine.prefix.prefixes.open_prefix / open_given) is used as it is, its storage options with it:
    # nothing resolves or opens it again (storage_options stays None then)
    prefix: Optional[str | OpenedPrefix] = None
    only: Optional[str] = None  # regex over step names: these plus what they need
    force_failed: bool = True  # retry steps whose previous attempt failed
    force_run: Optional[str] = None  # regex: re-run matching steps even when they succeeded
    max_concurrent: int = 8
    ray_address: Optional[str] = None  # None: env RAY_ADDRESS, else an embedded local cluster
    runner: str = "auto"  # auto (Ray only for steps that need it) | ray | inline (runner/auto.py)
    lease_ttl: float = 60.0
    heartbeat_interval: float = 15.0
    # fsspec options: one object (for the prefix's protocol), one per location ({"s3://corpus": {...},
    # "gs://": {...}}, longest match wins) or a Storage; None: env EXECUTOR_STORAGE_OPTIONS
    storage_options: Optional[Any] = None
    # prefixes whose outputs (same digest, SUCCESS) are copied and checked instead of run; empty:
    # env EXECUTOR_CACHE_FROM (comma-separated)
    cache_from: tuple[str, ...] = ()
    # at most this many GB moved per run: cache copies, mirrored inputs and cross-region reads together
    transfer_budget_gb: float = 10.0
    # buckets or prefixes that may hold the run's mirrored(...) inputs, each under the input's key;
    # empty: env EXECUTOR_MIRROR_SOURCES (comma-separated)
    mirror_sources: tuple[str, ...] = ()
    allow_cross_region: bool = False  # run although EXECUTOR_REGION differs from the prefix bucket's location
    # a completed step whose code changed since its output was made (docs/editing-code.md): "warn" reuses it
    # with a warning naming each changed function; "strict" re-runs it (a new attempt at the same id)
    drift: str = "warn"


class StepFailed(Exception):
    """A step did not succeed (its own code failed, a dependency failed, or the run was interrupted).

    Not an ExecutorError: the experiment is fine, a step's run was not. `.result` holds the run.
    """

    def __init__(self, message: str, result: "RunResult"):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class StepReport:
    """One step of a plan or a run: where its output is, what was decided, and how it ended."""

    name: str
    step_id: str
    digest: str
    output_path: str
    decision: Action  # run | copy | skip | wait | blocked | stop (a str: equal to its word)
    reason: str
    status: Optional[Outcome] = None  # after a run: succeeded | failed | blocked (| pending if interrupted)
    error: Optional[str] = None
    ran_here: bool = False
    cut_off: Optional[str] = None  # succeeded without running (early cutoff): why ("cut off: …")

    @property
    def succeeded(self) -> bool:
        return self.status == Outcome.SUCCEEDED or (self.status is None and self.decision == Action.SKIP)


@dataclass(frozen=True)
class _Steps:
    """Step reports in topological order, looked up by step object, name or step id."""

    prefix: str
    steps: tuple[StepReport, ...]
    graph: Graph = field(repr=False, compare=False)

    def step(self, which: ExecutorStep | str) -> StepReport:
        if isinstance(which, ExecutorStep):
            digest = self.graph.digest_by_object.get(id(which))
            found = [s for s in self.steps if s.digest == digest]
        else:
            found = [s for s in self.steps if which in (s.name, s.step_id)]
        if len(found) != 1:
            names = ", ".join(s.name for s in self.steps)
            what = "matches several steps" if found else "is not in this plan"
            raise KeyError(f"{which!r} {what}; steps: {names}")
        return found[0]

    def output_path(self, which: ExecutorStep | str) -> str:
        return self.step(which).output_path


@dataclass(frozen=True)
class PlanResult(_Steps):
    """What a run would do; reads statuses, writes nothing."""

    plan: Plan = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    storage_options: Storage = field(default_factory=Storage, repr=False, compare=False)  # keyed by location
    store: Any = field(default=None, repr=False, compare=False)
    fs: Any = field(default=None, repr=False, compare=False)
    opened: Optional[OpenedPrefix] = field(default=None, repr=False, compare=False)  # the prefix, as opened once
    cache_from: tuple[OpenedPrefix, ...] = field(default=(), repr=False, compare=False)  # --cache-from, opened once

    @property
    def needs_runner(self) -> bool:
        return self.plan.needs_runner


@dataclass(frozen=True)
class RunResult(_Steps):
    """What a run did: per step its output path, plan decision and final status."""

    run_id: Optional[str] = None
    run_file: Optional[str] = None  # None when nothing needed running (nothing is written then)
    interrupted: bool = False
    signum: Optional[int] = None  # the signal that interrupted the run (SIGINT, SIGTERM)
    runner_error: Optional[str] = None  # the run loop itself broke; every running step was failed

    @property
    def failed(self) -> list[StepReport]:
        return [s for s in self.steps if not s.succeeded]

    @property
    def ok(self) -> bool:
        return not self.interrupted and not self.failed

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this run: 0 all done, 1 a step failed (or the runner broke),
        128 + the signal's number when a signal stopped it (130 Ctrl-C, 143 SIGTERM)."""
        if self.interrupted:
            return for_signal(self.signum or signal.SIGINT)
        return ExitCode.FAILED if (self.failed or self.runner_error) else ExitCode.OK

    def raise_on_failure(self) -> "RunResult":
        if not self.ok:
            raise StepFailed(_failure_message(self.failed, self.interrupted), self)
        return self


def _failure_message(failed: list[StepReport], interrupted: bool) -> str:
    head = "interrupted; " if interrupted else ""
    return head + "; ".join(f"{s.name} {s.status or s.decision}" + (f": {s.error}" if s.error else "")
                            for s in failed) if failed else head + "nothing failed"


def _options(options: Options | None, overrides: dict[str, Any]) -> Options:
    return dataclasses.replace(options or Options(), **overrides)


def main_file_path() -> str | None:
    """The running script's absolute path (None without a script file: a notebook, a REPL, stdin)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return str(Path(path).resolve()) if path and Path(path).is_file() else None


def _output_path(prefix: str, decision: Decision) -> str:
    status = decision.observed.status
    if status is not None and status.alias_of and decision.action == Action.SKIP:  # an adopted output
        return outputs.join(prefix, status.alias_of["output_rel"])
    return outputs.join(prefix, decision.node.output_rel)


def _report(prefix: str, decision: Decision, output_path: str | None = None, **after: Any) -> StepReport:
    """The step's report (a plan of 10,000 steps makes 10,000: built with new_frozen). `after`:
    status, error, ran_here."""
    node = decision.node
    fields = {"name": node.step.name, "step_id": node.step_id, "digest": node.digest,
              "output_path": output_path or _output_path(prefix, decision), "decision": decision.action,
              "reason": decision.reason, "status": None, "error": None, "ran_here": False, "cut_off": None}
    if after:
        fields.update(after)
    return new_frozen(StepReport, fields)


# -- plan -------------------------------------------------------------------------------------------

def plan(steps: Iterable[ExecutorStep], options: Options | None = None, *,
         environ: Mapping[str, str] | None = None, subscribers: Iterable[Subscriber] = (),
         **overrides: Any) -> PlanResult:
    """Decide, for `steps` and everything they need, what a run would do and why. Writes nothing;
    emits PlanMade to `subscribers`."""
    options, environ = _options(options, overrides), environment(environ)
    step_list = _step_list(steps)
    options = with_opened_prefix(options, environ)  # once: the graph's tags and the plan read one opened prefix
    graph = graph_of(step_list, options, environ)
    decided = decide(graph, options, environ=environ)
    Events(subscribers).emit(PlanMade(graph, decided.plan, decided.prefix, None, decided.fs, decided.storage_options,
                                      store=decided.store))
    return decided.result(graph)


def graph_of(steps: list[ExecutorStep], options: Options, environ: Mapping[str, str]) -> Graph:
    """The graph of `steps`, output_of_tag(...) placeholders resolved from the prefix's tags (the
    prefix is opened only if a config reads a tag)."""
    from executor.tools.tags import tag_lookup

    return build_graph(steps, tags=tag_lookup(lambda: _open(options, environ).store))


def environment(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    """The environment a call reads: `environ` when given, else a copy of this process's, taken
    once per call. The only read of the process environment in the API: each public function
    calls it once and passes its result inward (a run's every part sees the same values)."""
    return dict(os.environ) if environ is None else environ


def _open(options: Options, environ: Mapping[str, str]) -> OpenedPrefix:
    """The call's prefix: `options.prefix` when it is an OpenedPrefix (the command line's, or one a
    caller opened), else resolved and opened here (open_given: the one place that does it)."""
    if isinstance(options.prefix, OpenedPrefix):
        if options.storage_options is not None:
            raise ExecutorError("Options(prefix=<an opened prefix>, storage_options=...): an opened prefix holds its "
                                "storage options; give them to open_prefix, or give the prefix as a URL")
        return options.prefix
    return open_given(options.prefix, environ, main_file_path(), storage=options.storage_options)


def with_opened_prefix(options: Options, environ: Mapping[str, str] | None = None) -> Options:
    """`options` with their prefix opened (once; as it is when it is one already): every part of a call
    given them reads the same OpenedPrefix, none resolves or opens it again."""
    if isinstance(options.prefix, OpenedPrefix):
        return options
    return dataclasses.replace(options, prefix=_open(options, environment(environ)), storage_options=None)


class Decided(NamedTuple):
    """A plan and where it was made (the opened prefix: URL, storage options, store, filesystem):
    plan_graph's result without its per-step reports, which a dry run and a run with nothing to do never read."""

    opened: OpenedPrefix
    plan: Plan
    sources: tuple[OpenedPrefix, ...] = ()  # the --cache-from prefixes, opened once (in order)

    @property
    def prefix(self) -> str:
        return self.opened.url

    @property
    def storage_options(self) -> Storage:
        return self.opened.storage

    @property
    def store(self) -> Any:
        return self.opened.store

    @property
    def fs(self) -> Any:
        return self.opened.fs

    def result(self, graph: Graph) -> PlanResult:
        with gc_paused():  # a few acyclic objects per step
            reports = tuple(_report(self.prefix, d) for d in self.plan.decisions.values())
        return PlanResult(self.prefix, reports, graph, plan=self.plan, storage_options=self.storage_options,
                          store=self.store, fs=self.fs, opened=self.opened, cache_from=self.sources)


def _lease_settings(options: Options) -> Any:
    """The run's lease settings, checked (heartbeat under half the TTL) by every plan as a run checks
    them: a dry run refuses what a run would refuse. An ExecutorError naming both flags."""
    from executor.engine.run.lease import LeaseSettings

    try:
        return LeaseSettings(options.lease_ttl, options.heartbeat_interval)
    except ValueError as e:
        raise ExecutorError(f"--heartbeat-interval {options.heartbeat_interval:g} with --lease-ttl "
                            f"{options.lease_ttl:g}: {e}; lower --heartbeat-interval or raise --lease-ttl "
                            f"(Options.heartbeat_interval, Options.lease_ttl)") from None


def decide(graph: Graph, options: Options, *, environ: Mapping[str, str] | None = None,
           write: bool = False) -> Decided:
    """`write`: a run's plan, which may write (outputs made under legacy ids are adopted)."""
    _lease_settings(options)  # what a run would refuse is refused before anything is read (a dry run too)
    environ = environment(environ)
    opened = _open(options, environ)  # a run reuses it: store and fs
    prefix, storage_options, store, fs = opened.url, opened.storage, opened.store, opened.fs
    sources = _open_sources(options, environ, opened)  # each --cache-from prefix opened once, for the whole plan
    with gc_paused():  # a few acyclic objects per step: one pause for the whole plan
        snapshot = read_snapshot(store, graph.nodes.values())
        snapshot = carry_over(graph, snapshot, store, fs, prefix, write=write)
        tainted = _tainted(graph, snapshot, store, sources)
        plan_options = PlanOptions(options.force_failed, options.force_run, options.only, now=time.time(),
                                   tainted=tainted)
        decided = plan_steps(graph, snapshot, plan_options)
        decided = _strict_drift(graph, snapshot, decided, plan_options, options.drift, prefix, fs)
    decided = _plan_transfers(graph, decided, options, environ, opened, sources, tainted)
    return Decided(opened, decided, sources)


DRIFT_POLICIES = ("warn", "strict")


def _strict_drift(graph: Graph, snapshot: Any, planned: Plan, plan_options: PlanOptions, policy: str,
                  prefix: str, fs: Any) -> Plan:
    """--drift strict: plan again with every drifted step (code changed, not accepted) re-run."""
    if policy not in DRIFT_POLICIES:
        raise ExecutorError(f"drift={policy!r}: the drift policy is one of {', '.join(DRIFT_POLICIES)} (warn: reuse "
                            f"a completed step whose code changed, with a warning; strict: re-run it)")
    if policy != "strict":
        return planned
    from executor.tools.drift import strict_reasons

    reasons = strict_reasons(planned, prefix, fs)
    if not reasons:
        return planned
    return plan_steps(graph, snapshot, dataclasses.replace(plan_options, code_changed=reasons))


def _tainted(graph: Graph, snapshot: Any, store: Any, sources: tuple[OpenedPrefix, ...]) -> dict[str, str]:
    """digest -> why it is not reused: tainted here or in a --cache-from prefix (`sources`, opened), or
    derived from such an output (executor.tools.taint). One listing of taints/ per prefix; nothing more
    where it is empty."""
    from executor.tools.taint import all_taints, tainted_steps, through_tags, under_legacy_ids

    stores = [store, *(source.store for source in sources)]
    return tainted_steps(graph, snapshot, through_tags(store, graph, under_legacy_ids(graph, all_taints(stores))))


def _plan_transfers(graph: Graph, planned: Plan, options: Options, environ: Mapping[str, str],
                    opened: OpenedPrefix, cache_from: tuple[OpenedPrefix, ...],
                    tainted: Mapping[str, str] | None = None) -> Plan:
    """Cache copies (from `cache_from`, the --cache-from prefixes opened), mirrored inputs and cross-region
    reads under one transfer budget: the mirrored inputs and cross-region reads of the steps that run are
    reserved first (those steps cannot run without them), copies get the rest."""
    from executor.engine.transfers.budget import GB, copy_bytes

    prefix, storage, store = opened.url, opened.storage, opened.store

    def with_copies(reserved: int) -> Plan:
        if not cache_from:  # no source, no read: a run without --cache-from plans as before
            return planned
        from executor.engine.transfers.cache_from import plan_copies

        return plan_copies(graph, planned, cache_from, only=options.only, force_run=options.force_run,
                           budget_gb=options.transfer_budget_gb, reserved_bytes=reserved, refused=tainted)

    decided = with_copies(0)
    needed, reserved = _needed_transfers(decided, options, environ, prefix, storage, store)
    if cache_from and reserved and copy_bytes(decided) + reserved > options.transfer_budget_gb * GB:
        decided = with_copies(reserved)  # fewer copies: more steps run, which may need more transfers
        needed, _ = _needed_transfers(decided, options, environ, prefix, storage, store)
    return dataclasses.replace(decided, **needed)


def _needed_transfers(plan: Plan, options: Options, environ: Mapping[str, str], prefix: str,
                      storage: Storage, store: Any) -> tuple[dict[str, Any], int]:
    """What the plan's running steps need moved, as Plan fields (its mirrored inputs, its cross-region
    survey), and their bytes: the part of the transfer budget those steps need."""
    from executor.engine.transfers.regions import survey

    reads, unknown = survey(plan, prefix, storage)
    needed: dict[str, Any] = {"cross_region": (reads, unknown)}
    reserved = sum(r.bytes for r in reads if r.bytes is not None)
    if any(d.action == Action.RUN and d.node.mirrored for d in plan.decisions.values()):
        from executor.engine.transfers.mirror import mirror_sources_list, plan_mirrors, planned_bytes

        sources = mirror_sources_list(options.mirror_sources, environ)
        needed["mirrors"] = plan_mirrors(plan, store, sources, storage)
        reserved += planned_bytes(needed["mirrors"])
    return needed, reserved


def _cache_from(options: Options, environ: Mapping[str, str], prefix: str) -> tuple[str, ...]:
    if not options.cache_from and not environ.get("EXECUTOR_CACHE_FROM"):
        return ()
    from executor.engine.transfers.cache_from import cache_from_list

    return cache_from_list(options.cache_from, environ, prefix)


def _open_sources(options: Options, environ: Mapping[str, str], opened: OpenedPrefix) -> tuple[OpenedPrefix, ...]:
    """The --cache-from prefixes (else EXECUTOR_CACHE_FROM), each opened once with the run's storage
    options: the plan's taint check and copy sources, explain and the run read these, none opens one again."""
    return tuple(open_prefix(source, opened.storage) for source in _cache_from(options, environ, opened.url))


def plan_graph(graph: Graph, options: Options, *, environ: Mapping[str, str] | None = None) -> PlanResult:
    return decide(graph, options, environ=environ).result(graph)


def _step_list(steps: Iterable[ExecutorStep]) -> list[ExecutorStep]:
    if isinstance(steps, ExecutorStep):
        steps = [steps]
    step_list = list(steps or [])
    if not step_list:
        raise ExecutorError("no steps given")
    return step_list


# -- run --------------------------------------------------------------------------------------------

def run(steps: Iterable[ExecutorStep], options: Options | None = None, *, description: str | None = None,
        environ: Mapping[str, str] | None = None, subscribers: Iterable[Subscriber] = (),
        main_file: str | None = None, **overrides: Any) -> RunResult:
    """Run `steps` and everything they need; per step, its output path, decision and final status.

    `options` fields may also be given as keywords (`run(steps, prefix="gs://b/x", runner="inline")`).
    A failed step is a status in the result, not an exception: call `.raise_on_failure()` for one.
    `subscribers` are given each event of the run as it happens (executor.engine.events); without
    any, nothing is printed.
    """
    options, environ = _options(options, overrides), environment(environ)
    step_list = _step_list(steps)
    options = with_opened_prefix(options, environ)  # once: the graph's tags and the run read one opened prefix
    return run_graph(graph_of(step_list, options, environ), options, description=description,
                     environ=environ, subscribers=subscribers, main_file=main_file)


def materialize(step: ExecutorStep, options: Options | None = None, **kwargs: Any) -> str:
    """Run what `step` needs, then `step`, and return its output path; StepFailed if it did not succeed."""
    result = run([step], options, **kwargs)
    report = result.step(step)
    if not report.succeeded or result.interrupted:
        raise StepFailed(f"{report.name}: {report.status}" + (f": {report.error}" if report.error else ""), result)
    return report.output_path


class _Call(NamedTuple):
    """What a run records of its caller."""

    description: str | None
    main_file: str | None
    secret_flags: frozenset[str]  # flag names whose values are redacted from the recorded argv


def run_graph(graph: Graph, options: Options, *, description: str | None = None,
              environ: Mapping[str, str] | None = None, subscribers: Iterable[Subscriber] = (),
              main_file: str | None = None, secret_flags: Iterable[str] = ()) -> RunResult:
    """`secret_flags`: flag names whose values are redacted from the recorded argv (the CLI passes
    the experiment config's `secret(...)` fields). Emits PlanMade first and RunFinished last (with
    no result when the run raised)."""
    if options.max_concurrent < 1:
        raise ExecutorError(f"max_concurrent must be at least 1 (got {options.max_concurrent})")
    environ = environment(environ)  # once for the whole run
    events = Events(subscribers)
    started = time.time()
    decided = decide(graph, options, environ=environ, write=True)
    events.emit(PlanMade(graph, decided.plan, decided.prefix, description, decided.fs, decided.storage_options,
                         store=decided.store))
    call = _Call(description, main_file or main_file_path(), frozenset(secret_flags))
    try:
        result = _run_decided(graph, decided, options, events, environ, call)
    except BaseException:
        events.emit(RunFinished(None, time.time() - started))
        raise
    events.emit(RunFinished(result, time.time() - started))
    return result


def _run_decided(graph: Graph, decided: Decided, options: Options, events: Events, environ: Mapping[str, str],
                 call: _Call) -> RunResult:
    if not decided.plan.needs_runner:  # nothing to run or wait for: each step ends as the plan decided
        with gc_paused():
            return RunResult(decided.prefix, _ended_as_planned(decided.prefix, decided.plan.decisions.values()), graph)
    from executor.engine.run.signals import SignalGuard

    with SignalGuard() as guard:  # active only for executor_main, on the main thread (engine/run/signals.py)
        return _execute(graph, decided.result(graph), options, events, guard, environ, call)


def _ended_as_planned(prefix: str, decisions: Iterable[Decision]) -> tuple[StepReport, ...]:
    """Each step of a run with nothing to run: failed or blocked with the plan's reason, as in a
    run. _report's fields, written out in one loop: a no-op re-run of 10,000 steps makes 10,000."""
    root, reports = outputs.join(prefix), []
    for decision in decisions:
        node, action, observed = decision.node, decision.action, decision.observed.status
        status = outcome_of_action(action)
        if observed is not None and observed.alias_of and action == Action.SKIP:  # an adopted output
            output_path = outputs.join(prefix, observed.alias_of["output_rel"])
        else:
            output_path = root + "/" + node.output_rel.strip("/") if node.output_rel else root
        reports.append(new_frozen(StepReport, {
            "name": node.step.name, "step_id": node.step_id, "digest": node.digest, "output_path": output_path,
            "decision": action, "reason": decision.reason, "status": status,
            "error": decision.reason if status.unsuccessful else None, "ran_here": False, "cut_off": None}))
    return tuple(reports)


def _new_runner(options: Options, events: Events, environ: Mapping[str, str], prefix: str,
                ray_started: Callable[[], None]) -> Any:
    from executor.engine.runner.factory import new_runner

    # an inline step's child stops itself if this process goes silent for half the TTL
    return new_runner(options.runner, address=options.ray_address, environ=environ,
                      isolate=protocol_of(prefix) != "memory", silence_limit_s=options.lease_ttl / 2,
                      info=events.info, warning=events.warning, ray_started=ray_started)


class _RunnerSlot:
    """The run's runner, started on first use (a run whose every step is done elsewhere starts none)."""

    def __init__(self, options: Options, events: Events, environ: Mapping[str, str], prefix: str, guard: Any):
        self.options, self.events, self.environ, self.prefix, self.guard = options, events, environ, prefix, guard
        self.runner: Any = None

    def __call__(self) -> Any:
        if self.runner is None:
            # ray.init sets its own SIGTERM handler: ours again once Ray is up (auto: maybe later)
            self.runner = _new_runner(self.options, self.events, self.environ, self.prefix, self.guard.install)
        return self.runner

    def shutdown(self) -> None:
        if self.runner is not None:
            self.runner.shutdown()


def _check_runner(runner: _RunnerSlot, planned: PlanResult, options: Options) -> None:
    """The plan-time check against the runner (the cluster's shape; what the inline runner
    cannot do), before anything runs; ExecutorError naming every problem."""
    runnable = [(d.node.name, d.node.step.resources or Resources()) for d in planned.plan.decisions.values()
                if d.action in (Action.RUN, Action.WAIT)]
    problems = runner().check_steps(runnable, prefix_is_local=outputs.is_local(planned.prefix))
    if problems:
        where = {"inline": "the inline runner", "ray": "the cluster"}.get(options.runner, f"the {options.runner} runner")
        raise ExecutorError(f"{where} cannot run this plan; nothing was started:\n  " + "\n  ".join(problems))


def _execute(graph: Graph, planned: PlanResult, options: Options, events: Events, guard: Any,
             environ: Mapping[str, str], call: _Call) -> RunResult:
    # imported here: a plan or a no-op re-run needs none of the machinery that runs steps
    from executor.engine.run.execute import Execution
    from executor.engine.transfers.regions import check_run_region, note_cross_region_reads
    from executor.engine.run.signals import signum_of
    from executor.engine.transfers.budget import check_transfer_budget

    prefix = planned.prefix
    outputs.check_writable(prefix)
    if protocol_of(prefix) == "memory" and options.runner == "ray":
        raise ExecutorError("memory:// prefixes live in this process only, which Ray's workers cannot see; "
                            "use --runner inline or auto (the default)")
    check_run_region(prefix, planned.storage_options, environ, options.allow_cross_region, events)
    reads = note_cross_region_reads(planned.plan, prefix, planned.storage_options, events)
    planned_transfers = check_transfer_budget(planned.plan, reads, options.transfer_budget_gb)
    runner = _RunnerSlot(options, events, environ, prefix, guard)
    try:
        _check_runner(runner, planned, options)
    except KeyboardInterrupt as e:
        runner.shutdown()
        events.info("interrupted while starting Ray; nothing ran")
        return RunResult(prefix, planned.steps, graph, interrupted=True, signum=signum_of(e))
    except BaseException:
        runner.shutdown()
        raise
    with contextlib.ExitStack() as cleanup:  # whatever fails from here, the runner is shut down
        cleanup.callback(runner.shutdown)
        ctx = _run_context(planned, options, events, guard, runner, call, environ, planned_transfers.total)
        cleanup.callback(ctx.keeper.stop)  # Execution.run stops it too; this covers a failure before it started
        run_file = _begin_run_file(planned, ctx, events, guard, call)
        summary = Execution(graph, planned.plan, ctx).run()
    return _run_result(graph, planned, summary, ctx.owner.run_id, run_file.path)


def _run_context(planned: PlanResult, options: Options, events: Events, guard: Any, runner: _RunnerSlot,
                 call: _Call, environ: Mapping[str, str], planned_bytes: int) -> Any:
    import secrets

    from executor.engine.transfers.mirror import mirror_sources_list

    from executor.engine.run.execute import RunContext
    from executor.engine.run.lease import LeaseKeeper, StalenessWatch
    from executor.engine.run.provenance import invocation
    from executor.engine.run.signals import reason_for
    from executor.engine.transfers.budget import TransferLedger

    run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    info = invocation(call.main_file, call.secret_flags)
    owner = Owner(run_id=run_id, host=info["host"], pid=info["pid"], user=info["user"])
    settings = _lease_settings(options)
    keeper = LeaseKeeper(planned.store, settings)
    guard.on_force(lambda signum: keeper.release_all(reason_for(signum)))  # a forced exit releases leases first
    return RunContext(opened=planned.opened, owner=owner, keeper=keeper, watch=StalenessWatch(settings.ttl_s),
                      runner_factory=runner, events=events, invocation=info, main_file=call.main_file,
                      max_concurrent=options.max_concurrent,
                      mirror_sources=mirror_sources_list(options.mirror_sources, environ),
                      cache_from=tuple(source.url for source in planned.cache_from),
                      transfers=TransferLedger(options.transfer_budget_gb, planned_bytes))


def _begin_run_file(planned: PlanResult, ctx: Any, events: Events, guard: Any, call: _Call) -> Any:
    """The run file, written before any step starts and subscribed first to the run's events (it
    writes its final version at RunFinished, before the caller's subscribers see that event)."""
    from executor.engine.run.run_file import RunFile

    experiment = Path(call.main_file).stem if call.main_file else "experiment"
    run_file = RunFile.begin(planned, ctx.owner.run_id, experiment, call.description, call.main_file,
                             ctx.invocation, events)
    events.subscribers.insert(0, run_file)
    guard.on_force(lambda signum: run_file.forced(for_signal(signum)))
    events.emit(RunStarted(ctx.owner.run_id, run_file.path))
    return run_file


def _run_result(graph: Graph, planned: PlanResult, summary: Any, run_id: str, run_file: str) -> RunResult:
    ran_here = set(summary.ran_here)
    steps = tuple(_report(planned.prefix, d, status=summary.states[d.node.step_id],
                          error=summary.errors.get(d.node.step_id), ran_here=d.node.step_id in ran_here,
                          cut_off=summary.cut_off.get(d.node.step_id),
                          output_path=summary.output_paths.get(d.node.step_id))
                  for d in planned.plan.decisions.values())
    woken = tuple(_report(planned.prefix, d, status=summary.states[d.node.step_id],  # a failed copy's inputs
                          error=summary.errors.get(d.node.step_id), ran_here=d.node.step_id in ran_here,
                          cut_off=summary.cut_off.get(d.node.step_id),
                          output_path=summary.output_paths.get(d.node.step_id))
                  for d in planned.plan.standby.values() if d.node.step_id in summary.states)
    steps += woken
    return RunResult(planned.prefix, steps, graph, run_id=run_id, run_file=run_file,
                     interrupted=summary.interrupted, signum=summary.signum, runner_error=summary.runner_error)


# -- results ----------------------------------------------------------------------------------------

def load_result(step: ExecutorStep, options: Options | None = None, *, as_type: type | None = None,
                environ: Mapping[str, str] | None = None, **overrides: Any) -> Any:
    """What `step` returned when it succeeded, read back from its record (nothing runs).

    A returned dataclass comes back as an instance of `as_type`, or of the step function's return
    annotation when that is a dataclass; otherwise as the stored JSON data (a dataclass's fields).
    ExecutorError when the step has not succeeded under this prefix.
    """
    import json

    from executor.core.record import State, record_key
    from executor.engine.prefix import location
    from executor.engine.prefix.results import decode_result

    environ = environment(environ)
    options = with_opened_prefix(_options(options, overrides), environ)
    graph = graph_of([step], options, environ)
    node = graph.nodes[graph.digest_of(step)]
    prefix, storage, store = options.prefix.url, options.prefix.storage, options.prefix.store
    status = read_snapshot(store, [node])[node.digest].status
    if status is None or status.state != State.SUCCESS or status.digest != node.digest:
        found = "no status" if status is None else f"status {status.state.value}"
        raise ExecutorError(f"step {step.name!r} has not succeeded at {outputs.join(prefix, node.output_rel)} "
                            f"({found}); run it first, e.g. executor.materialize(step)")
    output_rel = status.alias_of["output_rel"] if status.alias_of else node.output_rel
    with location.open_file(outputs.join(prefix, record_key(output_rel)), "rb", storage=storage) as f:
        record = json.loads(f.read())
    data = record.get("result")
    cls = as_type or _returned_dataclass(step)
    if cls is None or cls is dict or not isinstance(data, dict):
        return data
    try:
        return decode_result(data, cls)
    except Exception as e:  # noqa: BLE001 - draccus raises several kinds; one clear message
        raise ExecutorError(f"step {step.name!r}: its stored result does not fit {cls.__qualname__} "
                            f"({type(e).__name__}: {e}); pass as_type=... or read the JSON data with "
                            f"as_type=dict") from None


def _returned_dataclass(step: ExecutorStep) -> type | None:
    import typing

    try:
        returned = typing.get_type_hints(step.fn).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve is no annotation
        return None
    return returned if isinstance(returned, type) and dataclasses.is_dataclass(returned) else None
