"""The run loop: plan -> lease -> submit -> fenced commit, reporting events as it goes.

Only steps whose blocking dependencies are SUCCESS (observed on storage) are started. A failure
blocks its dependents and lets other branches finish. A lost lease cancels the task and nothing
is published. An error while starting or committing one step (a storage error, an output-path
clash) fails that step only; an error of the runner itself fails every running step. Ctrl-C or
SIGTERM cancels running tasks and releases leases as FAILED with the reason. Whatever the ending,
no lease this process took is left RUNNING.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from executor.engine import outputs
from executor.engine.cache_copy import CacheCopies
from executor.engine.cutoff import Cutoffs
from executor.engine.mirror_copy import MirrorCopies
from executor.engine.transfers import TransferLedger
from executor.core.errors import ExecutorError
from executor.core.graph import Graph, StepNode
from executor.core.locations import Storage
from executor.engine.lease import Lease, LeaseKeeper, StalenessWatch
from executor.core.plan import Action, Decision, Plan
from executor.engine.fingerprint import record_fingerprint, status_digest
from executor.engine.provenance import function_fingerprint, function_reference
from executor.core.outcome import Outcome, outcome_of_action
from executor.core.record import Owner, State, Status, StepRecord, output_digest, record_key, status_key
from executor.engine.events import Events, LeaseLost, StepFinished, StepRetried, StepStarted, StepWaiting
from executor.engine import signals
from executor.engine.results import encode_result, portable_float, storable_result
from executor.engine.runner.base import Runner, StepCall, StepHandle, StepOutcome
from executor.engine.snapshot import observe
from executor.core.step import (MirroredPath, OutputPathOf, PrefixPath, Resources, TaggedOutput, ThisOutputPath,
                                 is_secret)
from executor.engine.store.base import CoordinationStore
from executor.core.tree import fold, resolve


@dataclass
class Tracked:
    node: StepNode
    state: Outcome
    first_generation: str | None  # generation in this invocation's first snapshot
    retry_failed: bool = False  # the first snapshot's FAILED may be retried (--force-failed)
    force_run: bool = False
    output_path: str | None = None
    lease: Lease | None = None
    handle: StepHandle | None = None
    started: float = 0.0
    user_retries_left: int = 0
    error: str | None = None
    ran_here: bool = False
    announced_wait: bool = False
    attempts: list[dict[str, Any]] = field(default_factory=list)  # the runner's tries, with causes
    content: str | None = None  # content_sha256 of its committed output, when known
    consumed: dict[str, str] = field(default_factory=dict)  # dependency digest -> content it was started on
    recheck: tuple[str, ...] = ()  # planned SKIP, unless these re-running dependencies change their output
    sources: tuple = ()  # planned COPY: the cache-from sources not yet tried (executor.engine.cache_copy)
    waiting_deps: bool = False  # holds its lease after a failed copy, until its dependencies are done
    cut_off: str | None = None  # committed by this run as an early cutoff: why (executor.engine.cutoff)


@dataclass(frozen=True)
class RunContext:
    """Everything the loop needs from outside, passed in (no environment reads here)."""

    prefix: str
    store: CoordinationStore
    fs: Any
    storage: Storage  # the run's storage options keyed by location: each step's call carries them
    owner: Owner
    keeper: LeaseKeeper
    watch: StalenessWatch
    runner_factory: Callable[[], Runner]
    events: Events
    invocation: dict[str, Any]
    main_file: str | None
    max_concurrent: int  # no default: RunOptions' is the only one
    mirror_sources: tuple[str, ...] = ()  # where mirrored inputs the plan did not foresee are looked for
    transfers: TransferLedger = field(default_factory=TransferLedger)  # the run's budget, for unforeseen copies
    poll_s: float = 0.5
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time


@dataclass
class RunSummary:
    """What the loop hands back to executor.api, which makes it the RunResult (ok, exit code)."""

    states: dict[str, Outcome] = field(default_factory=dict)  # by step_id
    errors: dict[str, str] = field(default_factory=dict)
    ran_here: list[str] = field(default_factory=list)
    output_paths: dict[str, str] = field(default_factory=dict)  # by step_id, where known (adopted: the alias's)
    interrupted: bool = False
    signum: int | None = None  # the signal that interrupted the run (SIGINT or SIGTERM)
    runner_error: str | None = None  # the run loop itself failed: every running step was failed
    cut_off: dict[str, str] = field(default_factory=dict)  # by step_id: committed as an early cutoff, why


def is_not_secret(f: Any) -> bool:
    return not is_secret(f)


def config_to_json(config: Any) -> Any:
    """The resolved config as JSON for the record, with secret fields left out."""
    def leaf(v: Any, path: tuple) -> Any:
        if isinstance(v, float):
            return portable_float(v)
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, enum.Enum):
            return v.name
        return str(v)

    def node(v: Any, children: list, path: tuple) -> Any:
        if isinstance(v, dict) or (hasattr(v, "__dataclass_fields__")):
            return {str(k): c for k, c in children}
        return [c for _, c in children]

    return fold(config, leaf, node, keep_field=is_not_secret)


class Execution:
    def __init__(self, graph: Graph, plan: Plan, ctx: RunContext):
        self.graph, self.plan, self.ctx = graph, plan, ctx
        self.runner: Runner | None = None
        self.tracked: dict[str, Tracked] = {}
        for digest, decision in plan.decisions.items():
            self.tracked[digest] = self._track(decision)
        self.dependents = graph.dependents()
        self.copies = CacheCopies(self)
        self.mirrors = MirrorCopies(self)
        self.cutoffs = Cutoffs(self, config_to_json)

    def _track(self, decision: Decision) -> Tracked:
        """How a planned step starts out in this run."""
        observed = decision.observed
        state = outcome_of_action(decision.action)
        t = Tracked(decision.node, state, observed.generation)
        t.retry_failed = (decision.action in (Action.RUN, Action.COPY) and observed.status is not None
                          and observed.status.state == State.FAILED)
        t.force_run = (decision.action == Action.RUN and observed.status is not None
                       and observed.status.state == State.SUCCESS)
        if state == Outcome.SUCCEEDED:
            t.output_path = self._output_path_from(decision.node, observed.status)
            t.content = observed.status.content_sha256 if observed.status else None
            if decision.recheck:  # decided once the re-running dependencies committed
                t.state, t.recheck = Outcome.PENDING, decision.recheck
        if state.unsuccessful:  # failed or blocked at plan time: its reason, as a step blocked later has its own
            t.error = decision.reason
        t.sources = decision.sources if decision.action == Action.COPY else ()
        return t

    # -- paths -----------------------------------------------------------------------------
    def _own_path(self, node: StepNode) -> str:
        return outputs.join(self.ctx.prefix, node.output_rel)

    def _output_path_from(self, node: StepNode, status: Status | None) -> str:
        if status is not None and status.alias_of:
            return outputs.join(self.ctx.prefix, status.alias_of["output_rel"])
        return self._own_path(node)

    def _dep_path(self, digest: str) -> str:
        t = self.tracked.get(digest)
        if t is not None and t.output_path:
            return t.output_path
        return self._own_path(self.graph.nodes[digest])  # a nonblocking or unselected dependency

    def resolve_config(self, node: StepNode) -> Any:
        own = self._own_path(node)

        def substitute(value: Any, path: tuple) -> Any:
            if isinstance(value, OutputPathOf):
                return outputs.join(self._dep_path(self.graph.digest_of(value.step)), value.sub)
            if isinstance(value, ThisOutputPath):
                return outputs.join(own, value.sub)
            if isinstance(value, PrefixPath):
                return outputs.join(self.ctx.prefix, value.path)
            if isinstance(value, MirroredPath):  # its checked copy (executor.engine.mirror_copy)
                return outputs.join(self.ctx.prefix, value.mirror_rel)
            if isinstance(value, TaggedOutput):  # where the tag pointed when planned (executor.tools.tags)
                return outputs.join(self.ctx.prefix, node.tags[value.tag].output_rel, value.sub)
            return value

        return resolve(node.step.config, substitute)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> RunSummary:
        summary = RunSummary()
        try:
            self.mirrors.prepare()  # the mirrored inputs of the steps that run, copied before any starts
            while self._active():
                self._start_ready()
                self._collect_finished()
                self._police_running()
        except KeyboardInterrupt as e:
            summary.interrupted, summary.signum = True, signals.signum_of(e)
            self._interrupt(signals.reason_for(summary.signum))
        except Exception as e:  # noqa: BLE001 - the loop or runner broke: end honestly, release every lease
            summary.runner_error = f"{type(e).__name__}: {e}"
            self.ctx.events.warning(f"the run stopped on an error of the runner itself: {summary.runner_error}")
            self._interrupt(f"runner error: {summary.runner_error}"[:500])
        except BaseException as e:  # SystemExit and the like propagate; our leases must not stay RUNNING
            self._interrupt(f"the run stopped: {type(e).__name__}: {e}")
            raise
        finally:
            self.ctx.keeper.stop()
            if self.runner is not None:
                self.runner.shutdown()
        for t in self.tracked.values():
            summary.states[t.node.step_id] = t.state
            if t.error:
                summary.errors[t.node.step_id] = t.error
            if t.ran_here:
                summary.ran_here.append(t.node.step_id)
            if t.output_path:
                summary.output_paths[t.node.step_id] = t.output_path
            if t.cut_off and t.state == Outcome.SUCCEEDED:
                summary.cut_off[t.node.step_id] = t.cut_off
        return summary

    def _active(self) -> bool:
        return any(not t.state.ended for t in self.tracked.values())

    def _deps_state(self, t: Tracked) -> str:
        """'ready', 'wait' or 'blocked' from the blocking dependencies' states (a copy reads none)."""
        if t.sources:
            return "ready"
        states = [self.tracked[d].state if d in self.tracked else Outcome.SUCCEEDED for d in t.node.deps]
        if any(s.unsuccessful for s in states):
            return "blocked"
        return "ready" if all(s == Outcome.SUCCEEDED for s in states) else "wait"

    def _running_count(self) -> int:
        return sum(t.state == Outcome.RUNNING and not t.waiting_deps for t in self.tracked.values())

    def _start_ready(self) -> None:
        running = self._running_count()  # counted once per pass: O(n), not O(n^2) (issue 4 benchmark)
        for t in list(self.tracked.values()):  # a failed copy may wake steps it needs: a copy of the list
            if t.waiting_deps:  # a copy that fell back to running starts as any step does: within the limit
                running += self.copies.resume(t, room=running < self.ctx.max_concurrent)
                continue
            if t.state not in (Outcome.PENDING, Outcome.WATCHING):
                continue
            deps = self._deps_state(t)
            if deps == "blocked":
                self._block(t)
            elif deps == "ready" and running < self.ctx.max_concurrent:
                try:
                    self._try_start(t)
                except Exception as e:  # noqa: BLE001 - storage error or clash: this step fails, not the run
                    self._fail(t, StepOutcome(ok=False, error=f"could not start: {type(e).__name__}: {e}"))
                running += t.state == Outcome.RUNNING

    def _block(self, t: Tracked) -> None:
        failed = next(self.tracked[d].node.name for d in t.node.deps
                      if d in self.tracked and self.tracked[d].state.unsuccessful)
        t.state, t.error = Outcome.BLOCKED, f"dependency {failed} failed"
        self.ctx.events.emit(StepFinished(t.node, Outcome.BLOCKED, error=t.error, dependency=failed))

    def _new_status(self, t: Tracked, attempt: int) -> Status:
        now = self.ctx.wall_clock()
        return Status(State.RUNNING, t.node.digest, t.node.step_id, seq=0, attempt=attempt,
                      owner=self.ctx.owner, written_at=now, started_at=now)

    def _try_start(self, t: Tracked) -> None:
        key = status_key(t.node.output_rel)
        versioned = self.ctx.store.read(key)
        observed = observe(versioned, f"{self.ctx.store.root}/{key}")
        status = observed.status
        if status is not None and status.digest != t.node.digest:
            raise ExecutorError(f"step {t.node.name!r}: {key} now holds digest {status.digest[:16]}…; refusing to touch it")
        if status is None:
            self._ensure_runner()
            lease = self.ctx.keeper.acquire(key, self._new_status(t, 1), None)
            takeover = False
        elif status.state == State.SUCCESS:
            if t.recheck and versioned.generation == t.first_generation:
                t.force_run = self._stale_input(t, status) is not None
                if not t.force_run:
                    self._note(f"{t.node.name}: still current (its inputs' content is unchanged)")
            if t.force_run and versioned.generation == t.first_generation:
                self._ensure_runner()
                lease = self.ctx.keeper.acquire(key, self._seq_after(t, status), versioned)
                takeover = False
            else:
                t.state, t.output_path = Outcome.SUCCEEDED, self._output_path_from(t.node, status)
                t.content = status.content_sha256
                if t.first_generation != versioned.generation:
                    self.ctx.events.emit(StepFinished(t.node, Outcome.SUCCEEDED, elsewhere=True))
                return
        elif status.state == State.RUNNING:
            age = self.ctx.watch.observe(key, versioned.generation)
            ours = status.owner is not None and status.owner.run_id == self.ctx.owner.run_id
            if age < self.ctx.watch.ttl_s and not ours:  # a lease we lost ourselves is retaken at once
                if t.state != Outcome.WATCHING or not t.announced_wait:
                    self.ctx.events.emit(StepWaiting(t.node, status, age, self.ctx.watch.ttl_s))
                    t.announced_wait = True
                elif age > 0:
                    self.ctx.events.emit(StepWaiting(t.node, status, age, self.ctx.watch.ttl_s, first=False))
                t.state = Outcome.WATCHING
                return
            self._ensure_runner()
            lease = self.ctx.keeper.acquire(key, self._seq_after(t, status), versioned)
            takeover = not ours
        else:  # FAILED
            if t.retry_failed and versioned.generation == t.first_generation:
                self._ensure_runner()
                lease = self.ctx.keeper.acquire(key, self._seq_after(t, status), versioned)
                takeover = False
            else:
                t.state, t.error = Outcome.FAILED, f"failed in another runner: {status.error}"
                self.ctx.events.emit(StepFinished(t.node, Outcome.FAILED, error=t.error, elsewhere=True))
                return
        if lease is None:
            t.state = Outcome.WATCHING  # lost the race: re-read on the next pass
            return
        self.ctx.watch.forget(key)
        if self.cutoffs.try_commit(t, lease):  # an earlier output consumed exactly these inputs: not run
            return
        self._submit(t, lease, takeover)

    def _note(self, message: str) -> None:
        self.ctx.events.info(message)  # plain text: the console renderer escapes it

    def _stale_input(self, t: Tracked, status: Status) -> str | None:
        """The name of a dependency whose committed output differs from what `status` consumed."""
        for dep in t.recheck:
            now_there = self.tracked[dep].content if dep in self.tracked else None
            if now_there is not None and now_there != (status.inputs or {}).get(dep, now_there):
                name = self.graph.nodes[dep].name
                self._note(f"{t.node.name}: stale: dependency {name} was re-run and its output changed; "
                           f"re-running")
                return name
        return None

    def _ensure_runner(self) -> None:
        """Start the runner (Ray can take a while) and the heartbeat before taking any lease."""
        if self.runner is None:
            self.runner = self.ctx.runner_factory()
            self.ctx.keeper.start()

    def _seq_after(self, t: Tracked, previous: Status) -> Status:
        fresh = self._new_status(t, previous.attempt + 1)
        return Status(**{**fresh.__dict__, "seq": previous.seq + 1})

    def _submit(self, t: Tracked, lease: Lease, takeover: bool) -> None:
        node = t.node
        t.lease, t.state, t.started = lease, Outcome.RUNNING, self.ctx.clock()
        t.output_path = self._own_path(node)
        if t.sources:
            self.copies.submit(t, takeover)
            return
        self._submit_step(t, takeover)

    def _submit_step(self, t: Tracked, takeover: bool) -> None:
        """Run the step's function under the lease `t` holds."""
        node, lease = t.node, t.lease
        t.ran_here = True
        resources = node.step.resources or Resources()
        t.user_retries_left = resources.retry_user_errors
        t.consumed = {d: self.tracked[d].content for d in node.deps
                      if d in self.tracked and self.tracked[d].content}
        missing_input = self.mirrors.ensure(node)  # its mirrored inputs copied here (normally done already)
        if missing_input:
            self._fail(t, StepOutcome(ok=False, error=missing_input))
            return
        try:
            node.identity_bytes  # its config encoded again and checked against its id, before it runs
            config = self.resolve_config(node)
            if outputs.is_local(self.ctx.prefix):
                self.ctx.fs.makedirs(t.output_path, exist_ok=True)
        except Exception as e:  # noqa: BLE001 - reported as this step's failure
            self._fail(t, StepOutcome(ok=False, error=f"could not prepare the step: {type(e).__name__}: {e}"))
            return
        call = StepCall(node.step_id, node.step.fn, config, t.output_path, resources, dict(resources.env),
                        attempt=lease.status.attempt, storage=self.ctx.storage)
        t.attempts = []
        t.handle = self.runner.submit(call)
        self.ctx.events.emit(StepStarted(node, lease.status.attempt, takeover, t.output_path))

    def _collect_finished(self) -> None:
        running = [t for t in self.tracked.values() if t.state == Outcome.RUNNING and t.handle]
        if not running:
            if any(t.state == Outcome.WATCHING for t in self.tracked.values()) or self._active():
                time.sleep(self.ctx.poll_s)
            return
        done = self.runner.wait([t.handle for t in running], timeout=self.ctx.poll_s)
        done_ids = {id(h) for h in done}
        for t in running:
            if id(t.handle) in done_ids:
                try:
                    self._finish(t, t.handle.outcome())
                except Exception as e:  # noqa: BLE001 - e.g. a storage error on its .executor/
                    self._fail(t, StepOutcome(ok=False, error=f"could not commit: {type(e).__name__}: {e}"))

    def _police_running(self) -> None:
        """Cancel tasks whose lease was lost or whose declared timeout has passed."""
        for t in self.tracked.values():
            if t.state != Outcome.RUNNING or t.lease is None:
                continue
            if not self.ctx.keeper.is_valid(t.lease):
                if t.handle is not None:
                    t.handle.cancel()
                t.waiting_deps = False
                self.ctx.events.emit(LeaseLost(t.node, t.lease.lost_reason or "lost"))
                t.state, t.lease, t.handle = Outcome.PENDING, None, None
                continue
            timeout = (t.node.step.resources or Resources()).timeout_s
            if timeout and t.handle is not None and self.ctx.clock() - t.started > timeout:
                t.handle.cancel()
                self._fail(t, StepOutcome(ok=False, error=f"timed out after {timeout:g}s (resources.timeout_s)"))

    def _finish(self, t: Tracked, outcome: StepOutcome) -> None:
        if t.sources:
            self.copies.finish(t, outcome)
            return
        t.attempts.extend(outcome.attempts)
        if not outcome.ok and not self.ctx.keeper.confirm(t.lease):
            # Ended because its lease was lost (an inline step stops itself when its runner was
            # paused past half the TTL): not the step's failure; re-read and follow the new owner.
            self.ctx.events.emit(LeaseLost(t.node, t.lease.lost_reason or "lost"))
            t.state, t.lease, t.handle = Outcome.PENDING, None, None
            return
        if not outcome.ok:
            if not outcome.infrastructure and t.user_retries_left > 0:
                t.user_retries_left -= 1
                self.ctx.events.emit(StepRetried(t.node, outcome.error or "error"))
                t.handle = self.runner.submit(t.handle.call)
                return
            self._fail(t, outcome)
            return
        result, result_type = encode_result(outcome.result)  # a dataclass: its fields as JSON data
        result, problem = storable_result(result)
        if problem:
            self._fail(t, StepOutcome(ok=False, error=problem))
            return
        # The record is written before the fenced commit, so confirm the lease first: a paused or
        # partitioned holder (silent past half the TTL, or its generation taken over) must not
        # overwrite the record of the runner that took over. A lease that only lapsed by our own
        # silence (nobody took it) is reclaimed: the function ended, it must not run again (issue 51).
        if not self.ctx.keeper.confirm(t.lease) and not self.ctx.keeper.reclaim(t.lease):
            self.ctx.events.emit(LeaseLost(t.node, t.lease.lost_reason or "lost before commit"))
            t.state, t.lease, t.handle = Outcome.PENDING, None, None
            return
        try:
            content = self._write_record(t, result, result_type)
        except Exception as e:  # noqa: BLE001
            self._fail(t, StepOutcome(ok=False, error=f"could not write the record: {type(e).__name__}: {e}"))
            return
        final = t.lease.status.next(state=State.SUCCESS, written_at=self.ctx.wall_clock(),
                                    function_sha256=status_digest(t.node.step.fn),
                                    content_sha256=content, inputs=t.consumed or None)
        if self.ctx.keeper.finish(t.lease, final):
            t.state, t.content = Outcome.SUCCEEDED, content
            self.ctx.events.emit(StepFinished(t.node, Outcome.SUCCEEDED, seconds=self.ctx.clock() - t.started,
                                              result=result))
        else:
            self.ctx.events.emit(LeaseLost(t.node, t.lease.lost_reason or "lost before commit"))
            t.state, t.lease, t.handle = Outcome.PENDING, None, None

    def _write_record(self, t: Tracked, result: Any, result_type: str | None = None) -> str:
        """Write record.json; returns the output's content digest (for the status)."""
        node = t.node
        deps = [{"name": self.graph.nodes[d].name, "step_id": self.graph.nodes[d].step_id,
                 "digest": d, "path": self._dep_path(d), "blocking": d in node.deps,
                 "content_sha256": t.consumed.get(d)}
                for d in (*node.deps, *node.weak_deps)]
        manifest = outputs.manifest(self.ctx.fs, t.output_path)
        record = StepRecord(
            step_id=node.step_id, digest=node.digest, name=node.name, identity=node.identity,
            config=config_to_json(t.handle.call.config), dependencies=deps,
            provenance={**self.ctx.invocation,
                        "function": function_reference(node.step.fn, self.ctx.main_file),
                        "function_sha256": function_fingerprint(node.step.fn),
                        "code_fingerprint": record_fingerprint(node.step.fn),
                        "description": node.step.description},
            result=result, manifest=manifest,
            timings={"started_at": t.lease.status.started_at or 0.0,
                     "finished_at": self.ctx.wall_clock(), "seconds": self.ctx.clock() - t.started},
            attempt=t.lease.status.attempt, run_id=self.ctx.owner.run_id,
            extra={"attempts": t.attempts} if t.attempts else {}, result_type=result_type)
        outputs.write_json(self.ctx.fs, outputs.join(self.ctx.prefix, record_key(node.output_rel)), record.to_bytes())
        return output_digest(manifest)

    def _fail(self, t: Tracked, outcome: StepOutcome) -> None:
        tail = (outcome.traceback or "")[-2000:] or None
        if t.lease is not None:
            final = t.lease.status.next(state=State.FAILED, error=outcome.error, traceback_tail=tail,
                                        written_at=self.ctx.wall_clock())
            try:
                self.ctx.keeper.finish(t.lease, final)
            except Exception as e:  # noqa: BLE001 - storage down: the lease goes stale after its TTL
                self.ctx.events.warning(f"{t.node.name}: could not record the failure: {e}")
        if t.handle is not None and not t.handle.done():
            t.handle.cancel()
        t.state, t.error = Outcome.FAILED, outcome.error
        self.ctx.events.emit(StepFinished(t.node, Outcome.FAILED, error=outcome.error or "failed",
                                          traceback_tail=tail))

    def _interrupt(self, reason: str = "interrupted (Ctrl-C)") -> None:
        running = [t for t in self.tracked.values() if t.state == Outcome.RUNNING]
        # Statuses first, tasks second: Ray's cancel path has known crash races (a RAY_CHECK in
        # its task manager, seen once in CI), and a crash there must not leave leases unreleased.
        self.ctx.keeper.release_all(reason)
        for t in running:
            t.state, t.error = Outcome.FAILED, reason
        for t in running:
            if t.handle is not None:
                try:
                    t.handle.cancel()
                except Exception:  # noqa: BLE001 - the lease is already released; keep cancelling the rest
                    pass
