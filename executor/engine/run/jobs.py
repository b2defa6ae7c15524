"""The run loop's jobs and what they share: every leased piece of work (a step, a cache copy, a mirror copy) is a `Job`.

A job names the jobs it needs (`needs`), a status key in the coordination store and the digest that key
must carry. The loop (executor.engine.run.execute) reads that status and takes the lease the same way for
every job (`Board.take_lease`: a SUCCESS or FAILED status is the job's to judge, a RUNNING one is watched
until silent for the TTL, then taken over); the heartbeat renews every lease held; `start` submits the
job's work to the runner (or settles it at once), `finish` commits what the runner returned under the
lease, and a failure or a lost lease ends through `Board.fail` / `Board.lose` whatever the job. A job
that holds its lease while what it needs is being made (`holding`) is resumed by the loop. The `Board`
is the run's shared state: its context, graph, plan, the jobs by id, and the runner once started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from executor.core.errors import ExecutorError
from executor.core.graph import Graph, StepNode
from executor.core.locations import Storage
from executor.core.outcome import Outcome
from executor.core.plan import Plan
from executor.core.record import Owner, State, Status
from executor.core.step import MirroredPath, OutputPathOf, PrefixPath, TaggedOutput, ThisOutputPath
from executor.core.tree import resolve
from executor.engine.prefix import outputs
from executor.engine.events import Events
from executor.engine.run.lease import Lease, LeaseKeeper, StalenessWatch
from executor.engine.run.mark_writer import MarkWriter
from executor.engine.runner.base import Runner, StepHandle, StepOutcome
from executor.engine.run.snapshot import observe
from executor.engine.store.base import CoordinationStore
from executor.engine.transfers.budget import TransferLedger

if TYPE_CHECKING:
    from executor.engine.prefix.prefixes import OpenedPrefix


@dataclass(frozen=True)
class RunContext:
    """Everything the loop needs from outside, passed in (no environment reads here)."""

    opened: OpenedPrefix  # the run's prefix, opened once: URL, storage options, store, filesystem
    owner: Owner
    keeper: LeaseKeeper
    watch: StalenessWatch
    runner_factory: Callable[[], Runner]
    events: Events
    invocation: dict[str, Any]
    main_file: str | None
    max_concurrent: int  # no default: RunOptions' is the only one
    mirror_sources: tuple[str, ...] = ()  # where mirrored inputs the plan did not foresee are looked for
    cache_from: tuple[str, ...] = ()  # --cache-from prefixes: steps may take shard results from there too
    transfers: TransferLedger = field(default_factory=TransferLedger)  # the run's budget, for unforeseen copies
    poll_s: float = 0.5
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time

    @property
    def prefix(self) -> str:
        return self.opened.url

    @property
    def store(self) -> CoordinationStore:
        return self.opened.store

    @property
    def fs(self) -> Any:
        return self.opened.fs

    @property
    def storage(self) -> Storage:
        """The run's storage options keyed by location: each step's call carries them."""
        return self.opened.storage


class Job:
    """One leased piece of work the loop schedules; subclasses say what it needs, does and commits."""

    name: str  # in messages: the step's name, or "mirror <url>"
    key: str  # its status in the coordination store: the lease
    digest: str  # what that status must carry
    step_id: str  # the status's step_id when this runner takes the lease
    slot: bool = True  # counts against --max-concurrent while it runs (steps, cache and mirror copies alike)
    failure_blocks: bool = True  # a failure blocks the jobs needing it (a mirror's readers fail themselves)

    def __init__(self) -> None:
        self.state = Outcome.PENDING
        self.lease: Lease | None = None
        self.handle: StepHandle | None = None
        self.started = 0.0
        self.error: str | None = None
        self.holding = False  # holds its lease until what it needs is done, then `resume`
        self.takeover = False  # its lease was taken over from another runner
        self.content: str | None = None  # content digest of what it committed, when known
        self.output_path: str | None = None

    # -- what subclasses say ----------------------------------------------------------------
    def needs(self) -> tuple[str, ...]:
        """Ids of the jobs (steps by digest, mirrors by URL) that must end before it starts."""
        return ()

    def settled_by(self, status: Status, generation: str) -> bool:
        """A SUCCESS or FAILED status found before taking the lease: True when that settles the job."""
        raise NotImplementedError

    def clash(self, status: Status) -> None:
        """Its status key holds another digest: refuse (raise, or end the job)."""
        raise ExecutorError(f"{self.name}: {self.key} now holds digest {status.digest[:16]}…; refusing to touch it")

    def waiting(self, status: Status, silent_s: float, ttl_s: float) -> None:
        """Another runner holds the lease and renews it: say so (the job waits)."""

    def block(self, failed: "Job") -> None:
        """A job it needs failed: it ends BLOCKED without a lease."""
        self.state, self.error = Outcome.BLOCKED, f"dependency {failed.name} failed"

    def start(self, lease: Lease) -> None:
        """Under `lease`: submit the work to the runner (self.handle) or settle the job at once."""
        raise NotImplementedError

    def resume(self) -> None:
        """A `holding` job whose needs have ended: start its work under the lease it holds."""
        raise NotImplementedError

    def finish(self, outcome: StepOutcome) -> None:
        """Its task returned: commit under the lease, try again, or fail."""
        raise NotImplementedError

    def on_lost(self, reason: str) -> None:
        """Its lease was lost (reported; the job reads its status again)."""

    def on_failed(self, error: str, traceback_tail: str | None) -> None:
        """It ended FAILED (reported)."""

    @property
    def timeout_s(self) -> float | None:
        return None


class Board:
    """The run's shared state, given to every job: the context, the graph and plan, the jobs, the runner."""

    def __init__(self, graph: Graph, plan: Plan, ctx: RunContext):
        self.graph, self.plan, self.ctx = graph, plan, ctx
        self.steps: dict[str, Job] = {}  # by digest
        self.mirrors: dict[str, Job] = {}  # by logical URL
        self.runner: Runner | None = None
        # the lineage marker writes of every commit (a run, a cutoff, a cache copy), drained by the run's end
        self.marks = MarkWriter(ctx.store, ctx.events)

    def job(self, job_id: str) -> Job | None:
        return self.steps.get(job_id) or self.mirrors.get(job_id)

    def note(self, message: str) -> None:
        self.ctx.events.info(message)  # plain text: the console renderer escapes it

    def ensure_runner(self) -> Runner:
        """Start the runner (Ray can take a while) and the heartbeat before taking any lease."""
        if self.runner is None:
            self.runner = self.ctx.runner_factory()
            self.ctx.keeper.start()
        return self.runner

    # -- paths -----------------------------------------------------------------------------
    def own_path(self, node: StepNode) -> str:
        return outputs.join(self.ctx.prefix, node.output_rel)

    def output_path_from(self, node: StepNode, status: Status | None) -> str:
        if status is not None and status.alias_of:
            return outputs.join(self.ctx.prefix, status.alias_of["output_rel"])
        return self.own_path(node)

    def dep_path(self, digest: str) -> str:
        job = self.steps.get(digest)
        if job is not None and job.output_path:
            return job.output_path
        return self.own_path(self.graph.nodes[digest])  # a nonblocking or unselected dependency

    def resolve_config(self, node: StepNode) -> Any:
        own = self.own_path(node)

        def substitute(value: Any, path: tuple) -> Any:
            if isinstance(value, OutputPathOf):
                return outputs.join(self.dep_path(self.graph.digest_of(value.step)), value.sub)
            if isinstance(value, ThisOutputPath):
                return outputs.join(own, value.sub)
            if isinstance(value, PrefixPath):
                return outputs.join(self.ctx.prefix, value.path)
            if isinstance(value, MirroredPath):  # its checked copy (executor.engine.transfers.mirror_copy)
                return outputs.join(self.ctx.prefix, value.mirror_rel)
            if isinstance(value, TaggedOutput):  # where the tag pointed when planned (executor.tools.tags)
                return outputs.join(self.ctx.prefix, node.tags[value.tag].output_rel, value.sub)
            return value

        return resolve(node.step.config, substitute)

    # -- the lease, the same way for every job -----------------------------------------------
    def readiness(self, job: Job) -> tuple[str, Job | None]:
        """'ready', 'wait' or 'blocked' (with the failed job) from the states of what `job` needs."""
        waiting = False
        for need in job.needs():
            other = self.job(need)
            if other is None or other.state == Outcome.SUCCEEDED:
                continue  # an unselected dependency counts as done
            if other.state.unsuccessful and other.failure_blocks:
                return "blocked", other
            waiting = waiting or not other.state.ended
        return ("wait" if waiting else "ready"), None

    def take_lease(self, job: Job) -> Lease | None:
        """Read the job's status and take its lease: None when the status settled the job, another
        runner holds it (the job waits) or another runner took it first (read again next pass)."""
        ctx, key = self.ctx, job.key
        versioned = ctx.store.read(key)
        status = observe(versioned, f"{ctx.store.root}/{key}").status
        if status is not None and status.digest != job.digest:
            job.clash(status)
            return None
        job.takeover = False
        if status is not None and status.state in (State.SUCCESS, State.FAILED):
            if job.settled_by(status, versioned.generation):
                return None
        elif status is not None:  # RUNNING: ours (a lease we lost ourselves) is retaken at once
            silent = ctx.watch.observe(key, versioned.generation)
            ours = status.owner is not None and status.owner.run_id == ctx.owner.run_id
            if silent < ctx.watch.ttl_s and not ours:
                job.waiting(status, silent, ctx.watch.ttl_s)
                job.state = Outcome.WATCHING
                return None
            job.takeover = not ours
        self.ensure_runner()
        lease = ctx.keeper.acquire(key, self._running(job, status), versioned if status is not None else None)
        if lease is None:
            job.state = Outcome.WATCHING  # lost the race: re-read on the next pass
            return None
        ctx.watch.forget(key)
        return lease

    def _running(self, job: Job, previous: Status | None) -> Status:
        now = self.ctx.wall_clock()
        return Status(State.RUNNING, job.digest, job.step_id, seq=previous.seq + 1 if previous else 0,
                      attempt=previous.attempt + 1 if previous else 1, owner=self.ctx.owner,
                      written_at=now, started_at=now)

    def run(self, job: Job, lease: Lease) -> None:
        """The job holds `lease` now: it runs (or holds its lease, waiting for what it needs)."""
        job.lease, job.state, job.started = lease, Outcome.RUNNING, self.ctx.clock()
        job.start(lease)

    def lose(self, job: Job, fallback: str = "lost") -> None:
        """Its lease is gone: its task cancelled, nothing committed; it reads its status again."""
        if job.handle is not None and not job.handle.done():
            job.handle.cancel()
        job.on_lost(job.lease.lost_reason or fallback if job.lease else fallback)
        job.state, job.lease, job.handle, job.holding = Outcome.PENDING, None, None, False

    def fail(self, job: Job, outcome: StepOutcome) -> None:
        """End the job FAILED: its lease released with the error, its task cancelled."""
        tail = (outcome.traceback or "")[-2000:] or None
        if job.lease is not None:
            final = job.lease.status.next(state=State.FAILED, error=outcome.error, traceback_tail=tail,
                                          written_at=self.ctx.wall_clock())
            try:
                self.ctx.keeper.finish(job.lease, final)
            except Exception as e:  # noqa: BLE001 - storage down: the lease goes stale after its TTL
                self.ctx.events.warning(f"{job.name}: could not record the failure: {e}")
        if job.handle is not None and not job.handle.done():
            job.handle.cancel()
        job.state, job.error, job.lease, job.holding = Outcome.FAILED, outcome.error, None, False
        job.on_failed(outcome.error or "failed", tail)
