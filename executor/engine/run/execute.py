"""The run loop: plan -> lease -> submit -> fenced commit, reporting events as it goes.

It schedules jobs (executor.engine.run.jobs): a step (step_job), a cache copy (cache_copy) and a mirrored
input's copy (mirror_copy), each leased, started, collected and committed the same way; no job waits
inside another, and the loop never blocks on one: it waits on every running task at once.

Only steps whose blocking dependencies are SUCCESS (observed on storage) are started. A failure
blocks its dependents and lets other branches finish. A lost lease cancels the task and nothing
is published. An error while starting or committing one step (a storage error, an output-path
clash) fails that step only; an error of the runner itself fails every running step. Ctrl-C or
SIGTERM cancels running tasks and releases leases as FAILED with the reason. Whatever the ending,
no lease this process took is left RUNNING.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from executor.core.graph import Graph
from executor.core.outcome import Outcome
from executor.core.plan import Plan
from executor.engine.run import signals
from executor.engine.transfers.cache_copy import job_for
from executor.engine.run.cutoff import Cutoffs
from executor.engine.run.jobs import Board, Job, RunContext
from executor.engine.transfers.mirror_copy import add_mirror_jobs, announce_complete
from executor.engine.runner.base import StepOutcome
from executor.engine.run.step_job import StepJob, config_to_json


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


class Execution:
    """One run of a plan: its jobs on a board, moved along pass by pass until every one has ended."""

    def __init__(self, graph: Graph, plan: Plan, ctx: RunContext):
        self.graph, self.plan, self.ctx = graph, plan, ctx
        self.board = Board(graph, plan, ctx)
        self.cutoffs = cutoffs = Cutoffs(self.board, config_to_json)
        add_mirror_jobs(self.board, list(plan.mirrors.values()))
        for digest, decision in plan.decisions.items():
            self.board.steps[digest] = job_for(self.board, decision, cutoffs)

    def run(self) -> RunSummary:
        summary = RunSummary()
        try:
            announce_complete(self.board)
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
            if self.board.runner is not None:
                self.board.runner.shutdown()
            self.board.marks.drain()  # no lineage marker write outlives the run (a failed one: a warning)
        return self._summarize(summary)

    def _summarize(self, summary: RunSummary) -> RunSummary:
        for job in self.board.steps.values():
            assert isinstance(job, StepJob)  # the board's steps are step jobs (cache copies among them)
            step_id = job.node.step_id
            summary.states[step_id] = job.state
            if job.error:
                summary.errors[step_id] = job.error
            if job.ran_here:
                summary.ran_here.append(step_id)
            if job.output_path:
                summary.output_paths[step_id] = job.output_path
            if job.cut_off and job.state == Outcome.SUCCEEDED:
                summary.cut_off[step_id] = job.cut_off
        return summary

    def _jobs(self) -> list[Job]:
        """Every job, mirrored inputs first: the copies steps wait for start before the steps do."""
        return [*self.board.mirrors.values(), *self.board.steps.values()]

    def _active(self) -> bool:
        return any(not job.state.ended for job in self._jobs())

    def _running_count(self) -> int:
        return sum(job.slot and job.state == Outcome.RUNNING and not job.holding for job in self._jobs())

    def _start_ready(self) -> None:
        running = self._running_count()  # counted once per pass: O(n), not O(n^2) (issue 4 benchmark)
        for job in self._jobs():  # a list: a failed copy may add the steps it needs to the board
            room = not job.slot or running < self.ctx.max_concurrent
            if job.holding:  # holds its lease (a copy fallen back to running, unplanned mirrors): within the limit
                running += self._guarded(job, "start", self._resume, job, room)
                continue
            if job.state not in (Outcome.PENDING, Outcome.WATCHING):
                continue
            ready, failed = self.board.readiness(job)
            if ready == "blocked":
                job.block(failed)
            elif ready == "ready" and room:
                self._guarded(job, "start", self._start, job)
                running += job.slot and job.state == Outcome.RUNNING

    def _guarded(self, job: Job, doing: str, act: Callable[..., Any], *args: Any) -> bool:
        """`act(*args)`; a storage error or a clash fails this job, not the run."""
        try:
            return bool(act(*args))
        except Exception as e:  # noqa: BLE001
            self.board.fail(job, StepOutcome(ok=False, error=f"could not {doing}: {type(e).__name__}: {e}"))
            return False

    def _start(self, job: Job) -> None:
        lease = self.board.take_lease(job)
        if lease is not None:
            self.board.run(job, lease)

    def _resume(self, job: Job, room: bool) -> bool:
        """A job holding its lease: started once what it needs has ended and there is `room`."""
        ready, failed = self.board.readiness(job)
        if ready == "wait" or (ready == "ready" and not room):
            return False
        if ready == "blocked":
            self.board.fail(job, StepOutcome(ok=False, error=f"dependency {failed.name} failed"))
            return False
        job.resume()
        return True

    def _collect_finished(self) -> None:
        running = [job for job in self._jobs() if job.state == Outcome.RUNNING and job.handle]
        if not running:
            if self._active():
                time.sleep(self.ctx.poll_s)
            return
        done = {id(h) for h in self.board.runner.wait([job.handle for job in running], timeout=self.ctx.poll_s)}
        for job in running:
            if id(job.handle) in done:
                self._guarded(job, "commit", lambda j: j.finish(j.handle.outcome()), job)

    def _police_running(self) -> None:
        """Cancel tasks whose lease was lost or whose declared timeout has passed."""
        for job in self._jobs():
            if job.state != Outcome.RUNNING or job.lease is None:
                continue
            if not self.ctx.keeper.is_valid(job.lease):
                self.board.lose(job)
                continue
            timeout = job.timeout_s
            if timeout and job.handle is not None and self.ctx.clock() - job.started > timeout:
                job.handle.cancel()
                self.board.fail(job, StepOutcome(ok=False, error=f"timed out after {timeout:g}s (resources.timeout_s)"))

    def _interrupt(self, reason: str = "interrupted (Ctrl-C)") -> None:
        running = [job for job in self._jobs() if job.state == Outcome.RUNNING]
        # Statuses first, tasks second: Ray's cancel path has known crash races (a RAY_CHECK in
        # its task manager, seen once in CI), and a crash there must not leave leases unreleased.
        self.ctx.keeper.release_all(reason)
        for job in running:
            job.state, job.error = Outcome.FAILED, reason
        for job in running:
            if job.handle is not None:
                try:
                    job.handle.cancel()
                except Exception:  # noqa: BLE001 - the lease is already released; keep cancelling the rest
                    pass


__all__ = ["Execution", "RunContext", "RunSummary"]
