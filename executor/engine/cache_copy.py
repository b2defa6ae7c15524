"""The run loop's side of `copy`: a step's output copied from a cache-from prefix under its lease.

The copy is submitted to the runner like a step (executor.engine.copy_output checks every file
against the source's manifest). Only when it returns does the executor confirm its lease, write the
record (the source's, saying where it came from) and the fenced SUCCESS status. A rejected source
is dropped: the next one is tried under the same lease; with none left, the step runs here, waking
the steps it needs that the plan had set aside (Plan.standby) and holding its lease until they
are done.
"""

from __future__ import annotations

from typing import Any

from executor.core.outcome import Outcome
from executor.core.record import State, output_digest, record_key, to_json_bytes
from executor.core.step import Resources
from executor.engine import outputs
from executor.engine.copy_output import CopyConfig, copy_output
from executor.engine.events import LeaseLost, StepFinished, StepStarted
from executor.engine.runner.base import StepCall, StepOutcome

# `Execution` / `Tracked` (executor.engine.execute) are named in quotes only: that module imports this one.
Execution = Tracked = Any


class CacheCopies:
    def __init__(self, execution: "Execution"):
        self.ex = execution

    def submit(self, t: "Tracked", takeover: bool = False) -> None:
        source = t.sources[0]
        ex = self.ex
        config = CopyConfig(source.output_path, t.output_path, tuple(source.files))
        call = StepCall(t.node.step_id, copy_output, config, t.output_path, Resources(), {},
                        attempt=t.lease.status.attempt, storage=ex.ctx.storage)
        ex._note(f"{t.node.name}: copying {source.describe()}")
        t.handle = ex.runner.submit(call)
        ex.ctx.events.emit(StepStarted(t.node, t.lease.status.attempt, takeover, t.output_path))

    def finish(self, t: "Tracked", outcome: StepOutcome) -> None:
        ex = self.ex
        if not ex.ctx.keeper.confirm(t.lease):  # the lease was lost: follow whoever has the step now
            ex.ctx.events.emit(LeaseLost(t.node, t.lease.lost_reason or "lost"))
            t.state, t.lease, t.handle = Outcome.PENDING, None, None
            return
        if outcome.ok:
            try:
                self._commit(t, outcome.result or {})
            except Exception as e:  # noqa: BLE001 - e.g. a storage error writing the record: the source is not used
                self._reject(t, f"could not commit the copy: {type(e).__name__}: {e}")
            return
        self._reject(t, outcome.error or "the copy failed")

    def _reject(self, t: "Tracked", why: str) -> None:
        source, t.sources, t.handle = t.sources[0], t.sources[1:], None
        self.ex.ctx.events.warning(f"{t.node.name}: not copied from {source.prefix}: {why}")
        if t.sources:
            self.submit(t)
            return
        self.ex._note(f"{t.node.name}: no cache-from source could be used; running it here")
        self.wake(t.node.digest)
        t.waiting_deps = True
        self.resume(t)  # in the place of its own copy: no further room under --max-concurrent needed

    def wake(self, digest: str) -> None:
        """Track the set-aside steps `digest` reads (and, for those that will run, theirs)."""
        ex = self.ex
        node = ex.graph.nodes[digest]
        for dep in (*node.deps, *node.weak_deps):
            decision = ex.plan.standby.get(dep)
            if decision is None or dep in ex.tracked:
                continue
            ex.tracked[dep] = ex._track(decision)
            if not decision.sources:
                self.wake(dep)

    def resume(self, t: "Tracked", room: bool = True) -> bool:
        """A step whose copy fell back to running: run it once its dependencies are done and there is
        `room` under --max-concurrent. True when it started."""
        ex = self.ex
        deps = ex._deps_state(t)
        if deps == "wait" or (deps == "ready" and not room):
            return False
        t.waiting_deps = False
        if deps == "blocked":
            failed = next(ex.tracked[d].node.name for d in t.node.deps
                          if d in ex.tracked and ex.tracked[d].state.unsuccessful)
            ex._fail(t, StepOutcome(ok=False, error=f"dependency {failed} failed"))
            return False
        t.started = ex.ctx.clock()
        ex._submit_step(t, False)
        return True

    def _commit(self, t: "Tracked", copied: dict[str, Any]) -> None:
        """The source's record, saying where it came from, then the fenced SUCCESS status. Its
        dependencies keep the paths the output was made from (under the source prefix): only the
        targets are copied, so the same paths here would name outputs that were never made here."""
        ex, source = self.ex, t.sources[0]
        record = dict(source.record)
        record["run_id"] = ex.ctx.owner.run_id
        here = outputs.join(ex.ctx.prefix, t.node.output_rel)
        for key in ("result", "config"):  # a path into the source's output names the copy here
            record[key] = rehomed(record.get(key), source.output_path, here)
        record["extra"] = {**(record.get("extra") or {}),
                           "copied_from": {"prefix": source.prefix, "run_id": source.run_id,
                                           "output_path": source.output_path, "timings": record.get("timings"),
                                           "files": copied.get("files"), "bytes": copied.get("bytes"),
                                           "seconds": copied.get("seconds")}}
        record["timings"] = {"started_at": t.lease.status.started_at or 0.0,
                             "finished_at": ex.ctx.wall_clock(), "seconds": ex.ctx.clock() - t.started}
        outputs.write_json(ex.ctx.fs, outputs.join(ex.ctx.prefix, record_key(t.node.output_rel)),
                           to_json_bytes(record))
        content = source.status.content_sha256 or output_digest(source.files)
        final = t.lease.status.next(state=State.SUCCESS, written_at=ex.ctx.wall_clock(),
                                    function_sha256=source.status.function_sha256, content_sha256=content,
                                    inputs=source.status.inputs, copied_from=source.prefix)
        if not ex.ctx.keeper.finish(t.lease, final):
            ex.ctx.events.emit(LeaseLost(t.node, t.lease.lost_reason or "lost before commit"))
            t.state, t.lease, t.handle = Outcome.PENDING, None, None
            return
        t.state, t.content, t.sources = Outcome.SUCCEEDED, content, ()
        ex.ctx.events.emit(StepFinished(t.node, Outcome.SUCCEEDED, seconds=ex.ctx.clock() - t.started,
                                        result=record.get("result")))


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
