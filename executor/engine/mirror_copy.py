"""The run loop's side of mirrored inputs: each one a step reads is copied once under the prefix, under a lease.

Before the loop starts any step, the mirrored inputs the plan copies are taken in hand together. Each
one's status (`mirror/.executor/<bucket>/<key>/status.json`) is read: complete, it is used; held by
another runner, this one waits (and takes it over once the lease has been silent for its TTL, as for a
step); otherwise this runner takes the lease and submits the copy to the runner like a step
(executor.engine.copy_output, on a worker on Ray): every file is checked against the size and checksum
its store reported at planning. A rejected source is dropped and the next tried under the same lease;
with none left the lease ends FAILED and the steps reading the input fail, saying why. Only after a copy
returns are its record (source and manifest) and the fenced SUCCESS written. A step that runs unplanned
(a cache copy that fell back to running, a step taken over) gets its mirrored inputs the same way just
before it starts. A copy the plan did not count (unplanned, or taken over from a silent runner) is
counted on the run's transfer budget when this runner takes it, and not made past it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from executor.core.plan import describe_owner
from executor.core.record import RECORD_SCHEMA, State, Status, output_digest, to_json_bytes
from executor.core.step import MirroredPath, Resources
from executor.engine import outputs
from executor.engine.copy_output import CopyConfig, copy_output
from executor.engine.events import MirrorCopied
from executor.engine.lease import Lease
from executor.engine.mirror import (Candidate, MirrorInput, coordination_rel, find_candidates, human_bytes,
                                    mirrored_fields, record_key, status_key)
from executor.engine.runner.base import StepCall, StepHandle
from executor.engine.snapshot import observe

# `Execution` (executor.engine.execute) is named in quotes only: that module imports this one.
Execution = Any


@dataclass
class _Job:
    """One mirrored input being obtained by this run."""

    input: MirrorInput
    candidates: list[Candidate] = field(default_factory=list)
    lease: Lease | None = None
    handle: StepHandle | None = None
    error: str | None = None
    done: bool = False
    announced: bool = False  # said once that another runner is copying it
    charged: bool = False  # counted on the run's transfer budget after planning (once, whatever the retries)

    @property
    def ended(self) -> bool:
        return self.done or self.error is not None


class MirrorCopies:
    def __init__(self, execution: "Execution"):
        self.ex = execution
        self.ready: set[str] = {m.logical for m in execution.plan.mirrors.values() if m.complete}
        self.failed: dict[str, str] = {}  # logical URL -> why no copy could be had

    def prepare(self) -> None:
        """Copy (or wait for) every mirrored input the plan needs that is not complete here yet."""
        for m in self.ex.plan.mirrors.values():
            if m.logical in self.ready:
                self.ex.ctx.events.emit(MirrorCopied(m.logical, m.rel, "already complete"))
        pending = [m for m in self.ex.plan.mirrors.values() if m.logical not in self.ready]
        if pending:
            self._obtain(pending)

    def ensure(self, node: Any) -> str | None:
        """Just before `node` runs: its mirrored inputs complete here (copied now if the plan did not
        foresee them); the reason when one could not be had."""
        if not node.mirrored:  # found while hashing: most steps read none
            return None
        fields = mirrored_fields(node.step.config)
        unplanned = {p.url: p for _, p in fields if p.url not in self.ready and p.url not in self.failed}
        if unplanned:
            self.ex._note(f"{node.name}: obtaining mirrored inputs the plan did not copy: {', '.join(unplanned)}")
            self._obtain([self.ex.plan.mirrors.get(url) or MirrorInput(url, p.mirror_rel, (node.name,),
                                                                       observe(None, url))
                          for url, p in unplanned.items()])
        problems = dict.fromkeys(self.failed[p.url] for _, p in fields if p.url in self.failed)
        return "; ".join(problems) or None

    # -- the loop over the jobs -------------------------------------------------------------
    def _obtain(self, inputs: list[MirrorInput]) -> None:
        jobs = [_Job(m, list(m.candidates)) for m in inputs]
        try:
            while any(not j.ended for j in jobs):
                for job in jobs:
                    if not job.ended:
                        self._advance(job)
                handles = [j.handle for j in jobs if j.handle is not None]
                if handles:
                    self.ex.runner.wait(handles, timeout=self.ex.ctx.poll_s)
                elif any(not j.ended for j in jobs):
                    time.sleep(self.ex.ctx.poll_s)
        except BaseException:  # interrupted: the caller releases the leases; the copies stop here
            for job in jobs:
                if job.handle is not None:
                    job.handle.cancel()
            raise
        for job in jobs:
            if job.error:
                self.failed[job.input.logical] = job.error
                self.ex.ctx.events.emit(MirrorCopied(job.input.logical, job.input.rel, "failed", error=job.error))
            else:
                self.ready.add(job.input.logical)

    def _advance(self, job: _Job) -> None:
        """One look at a job: collect its copy, or read its status and wait, use it, or take its lease."""
        if job.handle is not None:
            self._collect(job)
            return
        ctx, key = self.ex.ctx, status_key(job.input.rel)
        versioned = ctx.store.read(key)
        status = observe(versioned, f"{ctx.store.root}/{key}").status
        if status is not None and status.digest != job.input.digest:
            job.error = f"mirrored input {job.input.logical}: {key} holds another digest; refusing to touch it"
            return
        if status is not None and status.state == State.SUCCESS:
            job.done = True
            how = "copied by another runner" if job.announced else "already complete"
            self.ex.ctx.events.emit(MirrorCopied(job.input.logical, job.input.rel, how))
            return
        if status is not None and status.state == State.RUNNING:
            ours = status.owner is not None and status.owner.run_id == ctx.owner.run_id
            if ctx.watch.observe(key, versioned.generation) < ctx.watch.ttl_s and not ours:
                if not job.announced:
                    holder = describe_owner(status, ctx.wall_clock())
                    self.ex._note(f"mirror {job.input.logical}: being copied ({holder}); waiting for it")
                    job.announced = True
                return
        self._take(job, key, status, versioned)

    def _take(self, job: _Job, key: str, status: Status | None, versioned: Any) -> None:
        ctx = self.ex.ctx
        self.ex._ensure_runner()
        now = ctx.wall_clock()
        mine = Status(State.RUNNING, job.input.digest, job.input.rel, seq=status.seq + 1 if status else 0,
                      attempt=status.attempt + 1 if status else 1, owner=ctx.owner, written_at=now, started_at=now)
        job.lease = ctx.keeper.acquire(key, mine, versioned if status is not None else None)
        if job.lease is None:
            return  # another runner took it first: read again on the next pass
        ctx.watch.forget(key)
        if not job.candidates:  # taken over, or not planned: where is it?
            found, tried = find_candidates(MirroredPath(job.input.logical), ctx.mirror_sources, ctx.storage)
            job.candidates = list(found)
            if not found:
                self._give_up(job, f"found in no source (tried: {'; '.join(tried)})")
                return
        if not job.charged and job.input.bytes_to_copy == 0:  # the plan did not count it: count it now
            over = ctx.transfers.charge(f"copying mirrored input {job.input.logical}", job.candidates[0].bytes)
            if over is not None:
                self._give_up(job, f"not copied: {over}")
                return
            job.charged = True
        self._submit(job)

    def _submit(self, job: _Job) -> None:
        ctx, source = self.ex.ctx, job.candidates[0]
        copy_root = outputs.join(ctx.prefix, job.input.rel)
        self._clear(copy_root)  # what a runner that died mid-copy left: only checked files are committed
        if source.root != source.url:  # one file: copied into the directory above it
            copy_root = copy_root.rsplit("/", 1)[0]
        call = StepCall(job.input.rel, copy_output, CopyConfig(source.root, copy_root, source.files),
                        outputs.join(ctx.prefix, coordination_rel(job.input.rel)), Resources(), {},
                        attempt=job.lease.status.attempt, storage=ctx.storage)
        job.handle = self.ex.runner.submit(call)
        self.ex._note(f"mirror {job.input.logical}: copying {human_bytes(source.bytes)} ({len(source.files)} "
                      f"files) from {source.url}")

    def _clear(self, path: str) -> None:
        try:
            self.ex.ctx.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    def _collect(self, job: _Job) -> None:
        ctx = self.ex.ctx
        if not ctx.keeper.is_valid(job.lease):
            job.handle.cancel()
            self._lost(job)
            return
        if not job.handle.done():
            return
        outcome, job.handle = job.handle.outcome(), None
        if not ctx.keeper.confirm(job.lease):
            self._lost(job)
            return
        if outcome.ok:
            try:
                self._commit(job, outcome.result or {})
                return
            except Exception as e:  # noqa: BLE001 - e.g. a storage error writing the record: the source is not used
                why = f"could not commit the copy: {type(e).__name__}: {e}"
        else:
            why = outcome.error or "the copy failed"
        source = job.candidates.pop(0)
        ctx.events.warning(f"mirror {job.input.logical}: not copied from {source.url}: {why}")
        if job.candidates:
            self._submit(job)
        else:
            self._give_up(job, f"no source could be used (the last, {source.url}: {why})")

    def _lost(self, job: _Job) -> None:
        self.ex.ctx.events.warning(f"mirror {job.input.logical}: lease lost ({job.lease.lost_reason or 'lost'}); "
                                   f"reading its status again")
        job.lease, job.handle = None, None

    def _commit(self, job: _Job, copied: dict[str, Any]) -> None:
        """The record (where it came from, every file as its store reported it), then the fenced SUCCESS."""
        ctx, source = self.ex.ctx, job.candidates[0]
        copied = dict(copied)
        manifest = copied.pop("manifest", None) or list(source.files)  # checksums of the bytes copied
        record = {"schema": RECORD_SCHEMA, "step_id": job.input.rel, "digest": job.input.digest,
                  "name": f"mirror {job.input.logical}", "logical": job.input.logical, "source": source.url,
                  "manifest": manifest, "run_id": ctx.owner.run_id, "copied": copied,
                  "copied_at": ctx.wall_clock()}
        outputs.write_json(ctx.fs, outputs.join(ctx.prefix, record_key(job.input.rel)), to_json_bytes(record))
        final = job.lease.status.next(state=State.SUCCESS, written_at=ctx.wall_clock(),
                                      content_sha256=output_digest(manifest))
        if not ctx.keeper.finish(job.lease, final):
            self._lost(job)
            return
        job.done, job.lease = True, None
        ctx.events.emit(MirrorCopied(job.input.logical, job.input.rel, "copied", source.url, copied.get("bytes"),
                                     copied.get("files"), copied.get("seconds")))

    def _give_up(self, job: _Job, why: str) -> None:
        ctx = self.ex.ctx
        job.error = f"mirrored input {job.input.logical}: {why}"
        final = job.lease.status.next(state=State.FAILED, error=job.error, written_at=ctx.wall_clock())
        try:
            ctx.keeper.finish(job.lease, final)
        except Exception as e:  # noqa: BLE001 - storage down: the lease goes stale after its TTL
            ctx.events.warning(f"mirror {job.input.logical}: could not record the failure: {e}")
        job.lease = None

