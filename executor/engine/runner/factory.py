"""Which runner a run gets: auto (inline, and Ray when a step needs it), inline, or Ray (an
embedded cluster, or a joined one).

The one place a runner is chosen and built; the API asks here and imports no runner (nor Ray).
"""

from __future__ import annotations

from typing import Callable, Mapping

from executor.core.errors import ExecutorError
from executor.engine.runner.base import Runner

KINDS = ("auto", "ray", "inline")


def new_runner(kind: str, *, address: str | None, environ: Mapping[str, str], isolate: bool,
               silence_limit_s: float, info: Callable[[str], None], warning: Callable[[str], None],
               ray_started: Callable[[], None] = lambda: None) -> Runner:
    """`kind` "inline": each step in a child process that stops itself when this one goes silent
    for `silence_limit_s` (`isolate` False: on a thread of this process, for memory:// prefixes).
    "ray": the cluster at `address` (else RAY_ADDRESS), or an embedded one. "auto": "ray" when a
    cluster is given (an address, RAY_ADDRESS, or Ray already connected in this process), else
    inline with Ray started when a step first needs it (runner/auto.py). `ray_started` is called
    once Ray is up (ray.init installs signal handlers of its own)."""
    if kind not in KINDS:
        raise ExecutorError(f"runner {kind!r}: use one of {', '.join(KINDS)} (auto: Ray only for the steps "
                            f"that need it)")
    address = address or environ.get("RAY_ADDRESS") or None
    if kind == "inline" or (kind == "auto" and not address and not _ray_connected()):
        from executor.engine.runner.inline import InlineRunner

        inline = InlineRunner(isolate=isolate, silence_limit_s=silence_limit_s, escalate=kind == "auto" and isolate)
        if kind == "inline":
            return inline
        from executor.engine.runner.auto import AutoRunner

        def start_ray(reason: str) -> Runner:
            info(f"starting Ray ({reason})…")
            runner = _ray_runner(None, environ, warning)
            ray_started()
            return runner

        return AutoRunner(inline, start_ray if isolate else None)
    info("starting Ray…" if not address else f"joining Ray cluster at {address}…")
    runner = _ray_runner(address, environ, warning)
    ray_started()
    return runner


def _ray_connected() -> bool:
    from executor.engine.runner.ray_env import ray_is_active

    return ray_is_active()


def _ray_runner(address: str | None, environ: Mapping[str, str], warning: Callable[[str], None]) -> Runner:
    from executor.engine.runner.ray_runner import RayRunner

    return RayRunner(address=address, ship_code=environ.get("EXECUTOR_SHIP_CODE", "1") != "0",
                     shared_filesystem=environ.get("EXECUTOR_SHARED_FILESYSTEM") == "1", notify=warning)
