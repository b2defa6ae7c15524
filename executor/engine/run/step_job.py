"""A step as a job of the run loop: its function run under its lease, its record and fenced SUCCESS committed.

A step needs its blocking dependencies and the mirrored inputs it reads (mirror jobs, executor.engine.
mirror_copy). A SUCCESS found before taking the lease settles it (unless this run forces it again, or a
re-run dependency changed what it consumed); a FAILED one fails it unless --force-failed retries it.
Under its lease it is first offered to early cutoff (executor.engine.run.cutoff); otherwise its mirrored
inputs the plan did not foresee become mirror jobs it holds its lease for, and its function is submitted.
When the function returns, the lease is confirmed (or reclaimed, when only our own silence let it lapse),
the record written, then the fenced SUCCESS. A user error is retried as its resources allow.
"""

from __future__ import annotations

import enum
from typing import Any

from executor.core.errors import ExecutorError
from executor.core.outcome import Outcome, outcome_of_action
from executor.core.plan import Action, Decision
from executor.core.record import State, Status, StepRecord, output_digest, record_key, status_key
from executor.core.step import Resources, is_secret
from executor.core.tree import fold
from executor.engine.prefix import outputs
from executor.engine.run.cutoff import Cutoffs
from executor.engine.events import LeaseLost, StepFinished, StepRetried, StepStarted, StepWaiting
from executor.engine.run.fingerprint import record_fingerprint, status_digest
from executor.engine.run.jobs import Board, Job
from executor.engine.run.lease import Lease
from executor.engine.transfers.mirror import mirrored_fields
from executor.engine.transfers.mirror_copy import add_mirror_jobs, unplanned as unplanned_input
from executor.engine.run.provenance import function_fingerprint, function_reference
from executor.engine.prefix.results import encode_result, portable_float, storable_result
from executor.engine.runner.base import StepCall, StepOutcome
from executor.engine.worker.shard_sources import CacheFrom


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


class StepJob(Job):
    """One planned step of this run, from its decision to its committed output."""

    def __init__(self, board: Board, decision: Decision, cutoffs: Cutoffs):
        super().__init__()
        self.board, self.cutoffs, self.node = board, cutoffs, decision.node
        node, observed = decision.node, decision.observed
        self.name, self.key, self.digest, self.step_id = node.name, status_key(node.output_rel), node.digest, node.step_id
        self.state = outcome_of_action(decision.action)
        self.first_generation = observed.generation  # in this invocation's first snapshot
        stored = observed.status.state if observed.status is not None else None
        self.retry_failed = decision.action in (Action.RUN, Action.COPY) and stored == State.FAILED  # --force-failed
        self.force_run = decision.action == Action.RUN and stored == State.SUCCESS
        self.recheck: tuple[str, ...] = ()  # planned SKIP, unless these re-running dependencies change their output
        self.user_retries_left, self.ran_here, self.announced_wait = 0, False, False
        self.attempts: list[dict[str, Any]] = []  # the runner's tries, with causes
        self.consumed: dict[str, str] = {}  # dependency digest -> content it was started on
        self.cut_off: str | None = None  # committed by this run as an early cutoff: why (executor.engine.run.cutoff)
        if self.state == Outcome.SUCCEEDED:
            self.output_path = board.output_path_from(node, observed.status)
            self.content = observed.status.content_sha256 if observed.status else None
            if decision.recheck:  # decided once the re-running dependencies committed
                self.state, self.recheck = Outcome.PENDING, decision.recheck
        if self.state.unsuccessful:  # failed or blocked at plan time: its reason, as a step blocked later has its own
            self.error = decision.reason

    def needs(self) -> tuple[str, ...]:
        if not self.node.mirrored:
            return self.node.deps
        return (*self.node.deps, *(url for url in self.node.mirrored if url in self.board.mirrors))

    @property
    def timeout_s(self) -> float | None:
        return (self.node.step.resources or Resources()).timeout_s

    # -- before the lease ------------------------------------------------------------------
    def settled_by(self, status: Status, generation: str) -> bool:
        ours_to_redo = generation == self.first_generation
        if status.state == State.FAILED:
            if self.retry_failed and ours_to_redo:
                return False
            self.state, self.error = Outcome.FAILED, f"failed in another runner: {status.error}"
            self.board.ctx.events.emit(StepFinished(self.node, Outcome.FAILED, error=self.error, elsewhere=True))
            return True
        if self.recheck and ours_to_redo:
            self.force_run = self._stale_input(status) is not None
            if not self.force_run:
                self.board.note(f"{self.name}: still current (its inputs' content is unchanged)")
        if self.force_run and ours_to_redo:
            return False
        self.state, self.output_path = Outcome.SUCCEEDED, self.board.output_path_from(self.node, status)
        self.content = status.content_sha256
        if self.first_generation != generation:
            self.board.ctx.events.emit(StepFinished(self.node, Outcome.SUCCEEDED, elsewhere=True))
        return True

    def _stale_input(self, status: Status) -> str | None:
        """The name of a dependency whose committed output differs from what `status` consumed."""
        for dep in self.recheck:
            job = self.board.steps.get(dep)
            now_there = job.content if job is not None else None
            if now_there is not None and now_there != (status.inputs or {}).get(dep, now_there):
                name = self.board.graph.nodes[dep].name
                self.board.note(f"{self.name}: stale: dependency {name} was re-run and its output changed; re-running")
                return name
        return None

    def clash(self, status: Status) -> None:
        raise ExecutorError(f"step {self.name!r}: {self.key} now holds digest {status.digest[:16]}…; "
                            f"refusing to touch it")

    def waiting(self, status: Status, silent_s: float, ttl_s: float) -> None:
        if self.state != Outcome.WATCHING or not self.announced_wait:
            self.board.ctx.events.emit(StepWaiting(self.node, status, silent_s, ttl_s))
            self.announced_wait = True
        elif silent_s > 0:
            self.board.ctx.events.emit(StepWaiting(self.node, status, silent_s, ttl_s, first=False))

    def block(self, failed: Job) -> None:
        self.state, self.error = Outcome.BLOCKED, f"dependency {failed.name} failed"
        self.board.ctx.events.emit(StepFinished(self.node, Outcome.BLOCKED, error=self.error, dependency=failed.name))

    # -- under the lease -------------------------------------------------------------------
    def start(self, lease: Lease) -> None:
        if self._cut_off(lease):  # an earlier output consumed exactly these inputs: not run
            return
        self.output_path = self.board.own_path(self.node)
        self.run_here()

    def resume(self) -> None:
        self.holding, self.started = False, self.board.ctx.clock()
        self.run_here()

    def run_here(self) -> None:
        """Its function submitted, once the mirrored inputs it reads are complete here."""
        self.ran_here = True
        if not self._await_unplanned_mirrors():
            self.submit()

    def _cut_off(self, lease: Lease) -> bool:
        """Commit the step as cut off when an earlier output of it consumed exactly its dependencies'
        outputs. True when settled here (cut off, or its lease lost); False: run it."""
        now = self.cutoffs.consumed_now(self.node) if self.node.deps and not self.force_run else None
        found = self.cutoffs.find_for(self.node, now) if now is not None else None
        if found is None:
            return False
        self.consumed = dict(now)
        if not self.cutoffs.commit(self.node, lease, found, self.consumed):
            self.board.lose(self, "lost before commit")
            return True
        self.state, self.content, self.cut_off = Outcome.SUCCEEDED, found.content_sha256, found.reason
        self.output_path = outputs.join(self.board.ctx.prefix, found.target["output_rel"])
        self.board.ctx.events.emit(StepFinished(self.node, Outcome.SUCCEEDED, cut_off=found.reason))
        return True

    def _await_unplanned_mirrors(self) -> bool:
        """Its mirrored inputs the plan did not foresee (a step taken over, a cache copy run here) become
        mirror jobs; it holds its lease until they end. True when it waits for some."""
        unplanned = {p.url: p for _, p in mirrored_fields(self.node.step.config) if p.url not in self.board.mirrors} \
            if self.node.mirrored else {}
        if not unplanned:
            return False
        self.board.note(f"{self.name}: obtaining mirrored inputs the plan did not copy: {', '.join(unplanned)}")
        add_mirror_jobs(self.board, [unplanned_input(url, p, self.name) for url, p in unplanned.items()])
        self.holding = True
        return True

    def _mirror_failures(self) -> str | None:
        jobs = [self.board.mirrors.get(url) for url in self.node.mirrored]
        problems = dict.fromkeys(j.error for j in jobs if j is not None and j.state == Outcome.FAILED and j.error)
        return "; ".join(problems) or None

    def submit(self) -> None:
        """Run the step's function under the lease it holds."""
        board, node, lease = self.board, self.node, self.lease
        resources = node.step.resources or Resources()
        self.user_retries_left = resources.retry_user_errors
        self.consumed = {d: board.steps[d].content for d in node.deps if d in board.steps and board.steps[d].content}
        missing_input = self._mirror_failures()
        if missing_input:
            board.fail(self, StepOutcome(ok=False, error=missing_input))
            return
        try:
            node.identity_bytes  # its config encoded again and checked against its id, before it runs
            config = board.resolve_config(node)
            if outputs.is_local(board.ctx.prefix):
                board.ctx.fs.makedirs(self.output_path, exist_ok=True)
        except Exception as e:  # noqa: BLE001 - reported as this step's failure
            board.fail(self, StepOutcome(ok=False, error=f"could not prepare the step: {type(e).__name__}: {e}"))
            return
        call = StepCall(node.step_id, node.step.fn, config, self.output_path, resources, dict(resources.env),
                        attempt=lease.status.attempt, storage=board.ctx.storage,
                        cache_from=self._cache_from(board))
        self.attempts = []
        self.handle = board.ensure_runner().submit(call)
        board.ctx.events.emit(StepStarted(node, lease.status.attempt, self.takeover, self.output_path))

    @staticmethod
    def _cache_from(board: Board) -> CacheFrom | None:
        """The run's prefix and --cache-from prefixes, where the step may find shard results (issue 48)."""
        return CacheFrom(board.ctx.prefix, board.ctx.cache_from) if board.ctx.cache_from else None

    def finish(self, outcome: StepOutcome) -> None:
        board, keeper = self.board, self.board.ctx.keeper
        self.attempts.extend(outcome.attempts)
        if not outcome.ok and not keeper.confirm(self.lease):
            # Ended because its lease was lost (an inline step stops itself when its runner was
            # paused past half the TTL): not the step's failure; re-read and follow the new owner.
            board.lose(self)
            return
        if not outcome.ok:
            if not outcome.infrastructure and self.user_retries_left > 0:
                self.user_retries_left -= 1
                board.ctx.events.emit(StepRetried(self.node, outcome.error or "error"))
                self.handle = board.ensure_runner().submit(self.handle.call)
                return
            board.fail(self, outcome)
            return
        result, result_type = encode_result(outcome.result)  # a dataclass: its fields as JSON data
        result, problem = storable_result(result)
        if problem:
            board.fail(self, StepOutcome(ok=False, error=problem))
            return
        self._commit(result, result_type)

    def _commit(self, result: Any, result_type: str | None) -> None:
        # The record is written before the fenced commit, so confirm the lease first: a paused or
        # partitioned holder (silent past half the TTL, or its generation taken over) must not
        # overwrite the record of the runner that took over. A lease that only lapsed by our own
        # silence (nobody took it) is reclaimed: the function ended, it must not run again (issue 51).
        board, keeper = self.board, self.board.ctx.keeper
        if not keeper.confirm(self.lease) and not keeper.reclaim(self.lease):
            board.lose(self, "lost before commit")
            return
        try:
            content = self.write_record(result, result_type)
        except Exception as e:  # noqa: BLE001
            board.fail(self, StepOutcome(ok=False, error=f"could not write the record: {type(e).__name__}: {e}"))
            return
        final = self.lease.status.next(state=State.SUCCESS, written_at=board.ctx.wall_clock(),
                                       function_sha256=status_digest(self.node.step.fn),
                                       content_sha256=content, inputs=self.consumed or None)
        if not keeper.finish(self.lease, final):
            board.lose(self, "lost before commit")
            return
        node = self.node
        self.board.marks.submit(node.output_rel, final, self.lease.generation,
                                  {"dependencies": [{"digest": d} for d in (*node.deps, *node.weak_deps)],
                                   "identity": node.identity})
        self.state, self.content = Outcome.SUCCEEDED, content
        board.ctx.events.emit(StepFinished(self.node, Outcome.SUCCEEDED, seconds=board.ctx.clock() - self.started,
                                           result=result))

    def write_record(self, result: Any, result_type: str | None = None) -> str:
        """Write record.json; returns the output's content digest (for the status)."""
        board, node, ctx = self.board, self.node, self.board.ctx
        deps = [{"name": board.graph.nodes[d].name, "step_id": board.graph.nodes[d].step_id,
                 "digest": d, "path": board.dep_path(d), "blocking": d in node.deps,
                 "content_sha256": self.consumed.get(d)}
                for d in (*node.deps, *node.weak_deps)]
        manifest = outputs.manifest(ctx.fs, self.output_path)
        record = StepRecord(
            step_id=node.step_id, digest=node.digest, name=node.name, identity=node.identity,
            config=config_to_json(self.handle.call.config), dependencies=deps,
            provenance={**ctx.invocation,
                        "function": function_reference(node.step.fn, ctx.main_file),
                        "function_sha256": function_fingerprint(node.step.fn),
                        "code_fingerprint": record_fingerprint(node.step.fn),
                        "description": node.step.description},
            result=result, manifest=manifest,
            timings={"started_at": self.lease.status.started_at or 0.0,
                     "finished_at": ctx.wall_clock(), "seconds": ctx.clock() - self.started},
            attempt=self.lease.status.attempt, run_id=ctx.owner.run_id,
            extra={"attempts": self.attempts} if self.attempts else {}, result_type=result_type)
        outputs.write_json(ctx.fs, outputs.join(ctx.prefix, record_key(node.output_rel)), record.to_bytes())
        return output_digest(manifest)

    # -- how it ended ----------------------------------------------------------------------
    def on_lost(self, reason: str) -> None:
        self.board.ctx.events.emit(LeaseLost(self.node, reason))

    def on_failed(self, error: str, traceback_tail: str | None) -> None:
        self.board.ctx.events.emit(StepFinished(self.node, Outcome.FAILED, error=error, traceback_tail=traceback_tail))


__all__ = ["StepJob", "config_to_json"]
