"""The default runner (`--runner auto`): Ray only for the steps that need it, started when one does.

A step needs Ray (`needs_ray`) when its Resources ask a scheduler for something: GPUs, memory,
custom resources, more than one host, or a CPU count other than the default 1; or when it fans
work out (`map_shards`). Every other step runs on the inline runner, in a child process of this
one, which starts in milliseconds where an embedded Ray cluster takes many seconds.

Ray starts (an embedded cluster, or the one at the run's address) the first time a step needs
it: at the plan-time check when the plan runs a step whose Resources need Ray (so an impossible
request is still refused before anything runs), or when an inline step reaches its first
`map_shards`: that step is stopped there (here.NeedsRay) and run again, from its start, on Ray.
Once Ray is up, every step that starts afterwards runs on it too: the cluster is paid for, and
forking a process that holds a Ray connection is unsafe. A run given a cluster (an address,
RAY_ADDRESS, or Ray already connected in this process) gets the Ray runner for every step: that
choice is made in factory.py, not here.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

from executor.core.step import Resources
from executor.engine.runner.base import Runner, StepCall, StepHandle, StepOutcome
from executor.engine.runner.inline import FailedHandle, InlineRunner

POLL_S = 0.1  # with steps on both runners, how often each is looked at


def needs_ray(r: Resources) -> str | None:
    """What in these resources only Ray provides (e.g. "gpus=1"), or None when the inline runner
    can run the step."""
    asked = [f"hosts={r.hosts}" if int(r.hosts) > 1 else "",
             f"gpus={r.gpus:g}" if r.gpus else "",
             f"memory_bytes={r.memory_bytes}" if r.memory_bytes else "",
             f"custom={dict(r.custom)}" if r.custom else "",
             f"cpus={r.cpus:g}" if r.cpus != 1 else ""]
    return ", ".join(a for a in asked if a) or None


class AutoHandle:
    """One step on whichever runner it was given; moves to Ray when its inline try asks for it."""

    def __init__(self, runner: "AutoRunner", call: StepCall, inner: StepHandle, on_ray: bool):
        self.runner, self.call, self.inner, self.on_ray = runner, call, inner, on_ray

    def done(self) -> bool:
        if not self.inner.done():
            return False
        if not self.on_ray and self.inner.outcome().needs_ray:
            self.on_ray = True
            try:
                self.inner = self.runner.ray(f"{self.call.step_id} fans work out (map_shards)").submit(self.call)
            except Exception as e:  # noqa: BLE001 - Ray did not start: this step fails, saying why
                self.inner = FailedHandle(self.call, f"{self.call.step_id} fans work out (map_shards), which needs "
                                                     f"Ray, but Ray could not start: {type(e).__name__}: {e}")
                return True
            return False
        return True

    def outcome(self) -> StepOutcome:
        while not self.done():
            self.runner.wait([self], timeout=1.0)
        return self.inner.outcome()

    def cancel(self) -> None:
        self.inner.cancel()


class AutoRunner:
    """The inline runner, plus a Ray runner made by `start_ray(reason)` on first need (None: a
    memory:// prefix, where no step may need Ray)."""

    def __init__(self, inline: InlineRunner, start_ray: Callable[[str], Runner] | None):
        self.inline, self._start_ray = inline, start_ray
        self._ray: Runner | None = None

    def ray(self, reason: str) -> Runner:
        if self._ray is None:
            if self._start_ray is None:
                raise RuntimeError(f"{reason}, but a memory:// prefix lives in this process only: "
                                   f"use a directory or a bucket as --prefix")
            self._ray = self._start_ray(reason)
        return self._ray

    def check_steps(self, steps: Iterable[tuple[str, Resources]], *, prefix_is_local: bool) -> list[str]:
        """Every reason these steps could never run: those needing Ray are checked against the
        cluster (starting it), the others need nothing."""
        on_ray = [(name, r) for name, r in steps if needs_ray(r)]
        if not on_ray:
            return []
        name, r = on_ray[0]
        if self._start_ray is None:
            return [f"step {n!r} asks for Resources({needs_ray(res)}), which only Ray provides, but a memory:// "
                    f"prefix lives in this process only: use a directory or a bucket as --prefix" for n, res in on_ray]
        return self.ray(f"step {name!r} asks for Resources({needs_ray(r)})").check_steps(
            on_ray, prefix_is_local=prefix_is_local)

    def submit(self, call: StepCall) -> AutoHandle:
        why = needs_ray(call.resources)
        if self._ray is not None or why:
            return AutoHandle(self, call, self.ray(f"step {call.step_id!r} asks for Resources({why})").submit(call),
                              on_ray=True)
        return AutoHandle(self, call, self.inline.submit(call), on_ray=False)

    def wait(self, handles: Sequence[AutoHandle], timeout: float) -> list[AutoHandle]:
        if not handles:
            return []
        deadline = time.monotonic() + timeout
        while True:
            done = [h for h in handles if h.done()]
            left = deadline - time.monotonic()
            if done or left <= 0:
                return done
            on_ray = [h.inner for h in handles if h.on_ray]
            inline = [h.inner for h in handles if not h.on_ray]
            pause = min(left, POLL_S) if (on_ray and inline) else left
            if on_ray:
                self.ray("").wait(on_ray, pause)
            else:
                self.inline.wait(inline, pause)

    def shutdown(self) -> None:
        try:
            self.inline.shutdown()
        finally:
            if self._ray is not None:
                self._ray.shutdown()
