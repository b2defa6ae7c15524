"""The run loop's side of mirrored inputs: each one a step reads is copied once under the prefix, under a lease.

Each mirrored input the plan copies is a job of the run loop (`MirrorJob`, executor.engine.run.jobs) that the
steps reading it need; steps reading none run meanwhile, nothing waits inside another job. Its status (`mirror/.executor/<bucket>/<key>/status.json`) is read: complete, it is used; held by
another runner, this one waits (and takes it over once the lease has been silent for its TTL, as for a
step); otherwise this runner takes the lease and submits the copy to the runner like a step
(executor.engine.transfers.copy_output, on a worker on Ray): every file is checked against the size and checksum
its store reported at planning. A rejected source is dropped and the next tried under the same lease;
with none left the lease ends FAILED and the steps reading the input fail, saying why. Only after a copy
returns are its record (source and manifest) and the fenced SUCCESS written. A step that runs unplanned
(a cache copy that fell back to running, a step taken over) makes jobs of its mirrored inputs just
before it starts, and holds its lease until they end. A copy the plan did not count (unplanned, or taken over from a silent runner) is
counted on the run's transfer budget when this runner takes it, and not made past it. While it copies, a
mirror job takes one of `--max-concurrent`'s slots, as a step and a cache copy do: the limit bounds the
work this runner has running at once (processes, Ray tasks, bytes moving), whatever kind it is.
"""

from __future__ import annotations

from typing import Any

from executor.core.outcome import Outcome
from executor.core.plan import describe_owner
from executor.core.record import RECORD_SCHEMA, State, Status, output_digest, to_json_bytes
from executor.core.step import MirroredPath, Resources
from executor.engine.prefix import outputs
from executor.engine.transfers.copy_output import CopyConfig, copy_output
from executor.engine.events import MirrorCopied
from executor.engine.run.jobs import Board, Job
from executor.engine.run.lease import Lease
from executor.engine.transfers.mirror import (MirrorInput, coordination_rel, find_candidates, human_bytes, record_key,
                                    status_key)
from executor.engine.runner.base import StepCall, StepOutcome
from executor.engine.run.snapshot import observe


class MirrorJob(Job):
    """One mirrored input this run needs, obtained (or found complete) under its own lease."""

    failure_blocks = False  # its readers fail themselves, saying why the input could not be had

    def __init__(self, board: Board, mirror: MirrorInput):
        super().__init__()
        self.board, self.input = board, mirror
        self.name, self.key, self.digest, self.step_id = (f"mirror {mirror.logical}", status_key(mirror.rel),
                                                          mirror.digest, mirror.rel)
        self.candidates = list(mirror.candidates)
        self.announced = False  # said once that another runner is copying it
        self.charged = False  # counted on the run's transfer budget after planning (once, whatever the retries)
        if mirror.complete:
            self.state = Outcome.SUCCEEDED

    # -- before the lease ------------------------------------------------------------------
    # clash: Job's (refused naming the digest found, the first 16 hex; the loop fails the copy, not the run)
    def settled_by(self, status: Status, generation: str) -> bool:
        if status.state != State.SUCCESS:
            return False  # a failed copy is tried again
        self.state = Outcome.SUCCEEDED
        how = "copied by another runner" if self.announced else "already complete"
        self.board.ctx.events.emit(MirrorCopied(self.input.logical, self.input.rel, how))
        return True

    def waiting(self, status: Status, silent_s: float, ttl_s: float) -> None:
        if not self.announced:
            holder = describe_owner(status, self.board.ctx.wall_clock())
            self.board.note(f"mirror {self.input.logical}: being copied ({holder}); waiting for it")
            self.announced = True

    # -- under the lease -------------------------------------------------------------------
    def start(self, lease: Lease) -> None:
        ctx = self.board.ctx
        if not self.candidates:  # taken over, or not planned: where is it?
            found, tried = find_candidates(MirroredPath(self.input.logical), ctx.mirror_sources, ctx.storage)
            self.candidates = list(found)
            if not found:
                self._give_up(f"found in no source (tried: {'; '.join(tried)})")
                return
        if not self.charged and self.input.bytes_to_copy == 0:  # the plan did not count it: count it now
            over = ctx.transfers.charge(f"copying mirrored input {self.input.logical}", self.candidates[0].bytes)
            if over is not None:
                self._give_up(f"not copied: {over}")
                return
            self.charged = True
        self._submit()

    def _submit(self) -> None:
        ctx, source = self.board.ctx, self.candidates[0]
        copy_root = outputs.join(ctx.prefix, self.input.rel)
        self._clear(copy_root)  # what a runner that died mid-copy left: only checked files are committed
        if source.root != source.url:  # one file: copied into the directory above it
            copy_root = copy_root.rsplit("/", 1)[0]
        call = StepCall(self.input.rel, copy_output, CopyConfig(source.root, copy_root, source.files),
                        outputs.join(ctx.prefix, coordination_rel(self.input.rel)), Resources(), {},
                        attempt=self.lease.status.attempt, storage=ctx.storage)
        self.handle = self.board.ensure_runner().submit(call)
        self.board.note(f"mirror {self.input.logical}: copying {human_bytes(source.bytes)} ({len(source.files)} "
                        f"files) from {source.url}")

    def _clear(self, path: str) -> None:
        try:
            self.board.ctx.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    def finish(self, outcome: StepOutcome) -> None:
        if not self.board.ctx.keeper.confirm(self.lease):
            self.board.lose(self)
            return
        if outcome.ok:
            try:
                self._commit(outcome.result or {})
                return
            except Exception as e:  # noqa: BLE001 - e.g. a storage error writing the record: the source is not used
                why = f"could not commit the copy: {type(e).__name__}: {e}"
        else:
            why = outcome.error or "the copy failed"
        source = self.candidates.pop(0)
        self.board.ctx.events.warning(f"mirror {self.input.logical}: not copied from {source.url}: {why}")
        if self.candidates:
            self._submit()
        else:
            self._give_up(f"no source could be used (the last, {source.url}: {why})")

    def _commit(self, copied: dict[str, Any]) -> None:
        """The record (where it came from, every file as its store reported it), then the fenced SUCCESS."""
        ctx, source, mirror = self.board.ctx, self.candidates[0], self.input
        copied = dict(copied)
        manifest = copied.pop("manifest", None) or list(source.files)  # checksums of the bytes copied
        record = {"schema": RECORD_SCHEMA, "step_id": mirror.rel, "digest": mirror.digest,
                  "name": f"mirror {mirror.logical}", "logical": mirror.logical, "source": source.url,
                  "manifest": manifest, "run_id": ctx.owner.run_id, "copied": copied,
                  "copied_at": ctx.wall_clock()}
        outputs.write_json(ctx.fs, outputs.join(ctx.prefix, record_key(mirror.rel)), to_json_bytes(record))
        final = self.lease.status.next(state=State.SUCCESS, written_at=ctx.wall_clock(),
                                       content_sha256=output_digest(manifest))
        if not ctx.keeper.finish(self.lease, final):
            self.board.lose(self)
            return
        self.state, self.lease, self.handle = Outcome.SUCCEEDED, None, None
        ctx.events.emit(MirrorCopied(mirror.logical, mirror.rel, "copied", source.url, copied.get("bytes"),
                                     copied.get("files"), copied.get("seconds")))

    def _give_up(self, why: str) -> None:
        self.board.fail(self, StepOutcome(ok=False, error=f"mirrored input {self.input.logical}: {why}"))

    # -- how it ended ----------------------------------------------------------------------
    def on_lost(self, reason: str) -> None:
        self.board.ctx.events.warning(f"mirror {self.input.logical}: lease lost ({reason}); reading its status again")

    def on_failed(self, error: str, traceback_tail: str | None) -> None:
        self.board.ctx.events.emit(MirrorCopied(self.input.logical, self.input.rel, "failed", error=error))


def add_mirror_jobs(board: Board, mirrors: list[MirrorInput]) -> None:
    """A job per mirrored input, on the board (complete ones start SUCCEEDED)."""
    for mirror in mirrors:
        board.mirrors[mirror.logical] = MirrorJob(board, mirror)


def unplanned(url: str, placeholder: MirroredPath, reader: str) -> MirrorInput:
    """A mirrored input the plan did not foresee: its candidates are looked for once its lease is taken."""
    return MirrorInput(url, placeholder.mirror_rel, (reader,), observe(None, url))


def announce_complete(board: Board) -> None:
    """Say, as the run starts, which mirrored inputs were complete under the prefix at planning."""
    for job in board.mirrors.values():
        if isinstance(job, MirrorJob) and job.state == Outcome.SUCCEEDED:
            board.ctx.events.emit(MirrorCopied(job.input.logical, job.input.rel, "already complete"))
