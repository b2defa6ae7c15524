"""The in-process runner, for unit tests and debugging: step functions run on a thread pool.

Everything runs in this one process, so a step that needs several processes (`Resources.hosts`
above 1: a jax.distributed group) is refused at plan time by `check_steps`, before anything runs.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import traceback
from typing import Iterable, Sequence

from executor.engine.runner.base import StepCall, StepOutcome
from executor.core.step import Resources


def run_call(call: StepCall) -> StepOutcome:
    """Run one step function and capture how it ended (shared by every runner)."""
    saved = {k: os.environ.get(k) for k in call.env}
    os.environ.update(call.env)
    try:
        return StepOutcome(ok=True, result=call.fn(call.config))
    except BaseException as e:  # noqa: BLE001 - user code may raise anything; we report it
        if isinstance(e, KeyboardInterrupt):
            raise
        return StepOutcome(ok=False, error=f"{type(e).__name__}: {e}",
                           traceback="".join(traceback.format_exception(e))[-4000:])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class InlineHandle:
    def __init__(self, call: StepCall, future: cf.Future):
        self.call, self.future = call, future

    def done(self) -> bool:
        return self.future.done()

    def outcome(self) -> StepOutcome:
        return self.future.result()

    def cancel(self) -> None:
        self.future.cancel()  # a running thread cannot be stopped; its result is ignored


class InlineRunner:
    def __init__(self, max_workers: int = 4):
        self.pool = cf.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="step")

    def check_steps(self, steps: Iterable[tuple[str, Resources]], *, prefix_is_local: bool) -> list[str]:
        """Every reason these steps cannot run in this process (empty when all can)."""
        return [f"step {name!r} asks for Resources(hosts={r.hosts}), but the in-process runner "
                f"(--runner inline) runs every step in this one process. Run it with the Ray runner "
                f"(--runner ray), or set hosts=1 to debug it in-process."
                for name, r in steps if int(r.hosts) > 1]

    def submit(self, call: StepCall) -> InlineHandle:
        return InlineHandle(call, self.pool.submit(run_call, call))

    def wait(self, handles: Sequence[InlineHandle], timeout: float) -> list[InlineHandle]:
        if not handles:
            return []
        cf.wait([h.future for h in handles], timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [h for h in handles if h.done()]

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
