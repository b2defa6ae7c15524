"""The run loop's side of `copy`: a step's output copied from a cache-from prefix under its lease.

A `CacheCopyJob` is a step job (executor.engine.run.step_job) whose work is first a copy, submitted to
the runner like a step (executor.engine.transfers.copy_output checks every file against the source's manifest). Only when it returns does the executor confirm its lease, write the
record (the source's, saying where it came from) and the fenced SUCCESS status. A rejected source
is dropped: the next one is tried under the same lease; with none left, the step runs here, waking
the steps it needs that the plan had set aside (Plan.standby) and holding its lease until they
are done.
"""

from __future__ import annotations

from typing import Any

from executor.core.outcome import Outcome
from executor.core.plan import Action, Decision
from executor.core.record import State, output_digest, record_key, to_json_bytes
from executor.core.step import Resources
from executor.engine.prefix import outputs
from executor.engine.transfers.copy_output import CopyConfig, copy_output
from executor.engine.run.cutoff import Cutoffs
from executor.engine.events import StepFinished, StepStarted
from executor.engine.run.jobs import Board
from executor.engine.run.lease import Lease
from executor.engine.runner.base import StepCall, StepOutcome
from executor.engine.run.step_job import StepJob


class CacheCopyJob(StepJob):
    """A step planned COPY: its output copied from the cache-from sources in turn, else run here."""

    def __init__(self, board: Board, decision: Decision, cutoffs: Cutoffs):
        super().__init__(board, decision, cutoffs)
        self.sources = decision.sources  # the cache-from sources not yet tried; () once it runs here

    def needs(self) -> tuple[str, ...]:
        return super().needs() if not self.sources else ()  # a copy reads none of its dependencies

    def start(self, lease: Lease) -> None:
        self.output_path = self.board.own_path(self.node)
        self._submit_copy(self.takeover)

    def _submit_copy(self, takeover: bool = False) -> None:
        source, board = self.sources[0], self.board
        config = CopyConfig(source.output_path, self.output_path, tuple(source.files))
        call = StepCall(self.node.step_id, copy_output, config, self.output_path, Resources(), {},
                        attempt=self.lease.status.attempt, storage=board.ctx.storage)
        board.note(f"{self.name}: copying {source.describe()}")
        self.handle = board.ensure_runner().submit(call)
        board.ctx.events.emit(StepStarted(self.node, self.lease.status.attempt, takeover, self.output_path))

    def finish(self, outcome: StepOutcome) -> None:
        if not self.sources:  # it fell back to running here: a step's ending
            super().finish(outcome)
            return
        if not self.board.ctx.keeper.confirm(self.lease):  # the lease was lost: follow whoever has the step now
            self.board.lose(self)
            return
        if outcome.ok:
            try:
                self._commit_copy(outcome.result or {})
            except Exception as e:  # noqa: BLE001 - e.g. a storage error writing the record: the source is not used
                self._reject(f"could not commit the copy: {type(e).__name__}: {e}")
            return
        self._reject(outcome.error or "the copy failed")

    def _reject(self, why: str) -> None:
        source, self.sources, self.handle = self.sources[0], self.sources[1:], None
        self.board.ctx.events.warning(f"{self.name}: not copied from {source.prefix}: {why}")
        if self.sources:
            self._submit_copy()
            return
        self.board.note(f"{self.name}: no cache-from source could be used; running it here")
        wake(self.board, self.node.digest, self.cutoffs)
        self.holding, self.takeover = True, False
        ready, failed = self.board.readiness(self)  # in the place of its own copy: no further room needed
        if ready == "blocked":
            self.board.fail(self, StepOutcome(ok=False, error=f"dependency {failed.name} failed"))
        elif ready == "ready":
            self.resume()

    def _commit_copy(self, copied: dict[str, Any]) -> None:
        """The source's record, saying where it came from, then the fenced SUCCESS status. Its
        dependencies keep the paths the output was made from (under the source prefix): only the
        targets are copied, so the same paths here would name outputs that were never made here."""
        ctx, source = self.board.ctx, self.sources[0]
        record = dict(source.record)
        record["run_id"] = ctx.owner.run_id
        here = outputs.join(ctx.prefix, self.node.output_rel)
        for key in ("result", "config"):  # a path into the source's output names the copy here
            record[key] = rehomed(record.get(key), source.output_path, here)
        record["extra"] = {**(record.get("extra") or {}),
                           "copied_from": {"prefix": source.prefix, "run_id": source.run_id,
                                           "output_path": source.output_path, "timings": record.get("timings"),
                                           "files": copied.get("files"), "bytes": copied.get("bytes"),
                                           "seconds": copied.get("seconds")}}
        record["timings"] = {"started_at": self.lease.status.started_at or 0.0,
                             "finished_at": ctx.wall_clock(), "seconds": ctx.clock() - self.started}
        outputs.write_json(ctx.fs, outputs.join(ctx.prefix, record_key(self.node.output_rel)), to_json_bytes(record))
        content = source.status.content_sha256 or output_digest(source.files)
        final = self.lease.status.next(state=State.SUCCESS, written_at=ctx.wall_clock(),
                                       function_sha256=source.status.function_sha256, content_sha256=content,
                                       inputs=source.status.inputs, copied_from=source.prefix)
        if not ctx.keeper.finish(self.lease, final):
            self.board.lose(self, "lost before commit")
            return
        self.board.marks.submit(self.node.output_rel, final, self.lease.generation, record)
        self.state, self.content, self.sources = Outcome.SUCCEEDED, content, ()
        ctx.events.emit(StepFinished(self.node, Outcome.SUCCEEDED, seconds=ctx.clock() - self.started,
                                     result=record.get("result")))


def job_for(board: Board, decision: Decision, cutoffs: Cutoffs) -> StepJob:
    """A planned step's job: a cache copy when the plan copies it from somewhere, else a step run here."""
    if decision.action == Action.COPY and decision.sources:
        return CacheCopyJob(board, decision, cutoffs)
    return StepJob(board, decision, cutoffs)


def wake(board: Board, digest: str, cutoffs: Cutoffs) -> None:
    """Track the set-aside steps `digest` reads (and, for those that will run, theirs)."""
    node = board.graph.nodes[digest]
    for dep in (*node.deps, *node.weak_deps):
        decision = board.plan.standby.get(dep)
        if decision is None or dep in board.steps:
            continue
        board.steps[dep] = job_for(board, decision, cutoffs)
        if not decision.sources:
            wake(board, dep, cutoffs)


def rehomed(value: Any, source_output: str, output: str) -> Any:
    """`value` (a record's result or config, as stored) with every string naming the source's output
    directory, or a path inside it, naming the same place in `output`."""
    if isinstance(value, str):
        if value == source_output or value.startswith(source_output.rstrip("/") + "/"):
            return output + value[len(source_output):]
        return value
    if isinstance(value, dict):
        return {k: rehomed(v, source_output, output) for k, v in value.items()}
    if isinstance(value, list):
        return [rehomed(v, source_output, output) for v in value]
    return value
