"""Which runner a run gets: the in-process one, or Ray (an embedded cluster, or a joined one).

The one place a runner is chosen and built; the API asks here and imports no runner (nor Ray).
"""

from __future__ import annotations

from typing import Callable, Mapping

from executor.core.errors import ExecutorError
from executor.engine.runner.base import Runner


def new_runner(kind: str, *, address: str | None, environ: Mapping[str, str], isolate: bool,
               silence_limit_s: float, info: Callable[[str], None], warning: Callable[[str], None]) -> Runner:
    """`kind` "inline": each step in a child process that stops itself when this one goes silent
    for `silence_limit_s` (`isolate` False: in this process, for memory:// prefixes). "ray": the
    cluster at `address` (else RAY_ADDRESS), or an embedded one."""
    if kind == "inline":
        from executor.engine.runner.inline import InlineRunner

        return InlineRunner(isolate=isolate, silence_limit_s=silence_limit_s)
    if kind != "ray":
        raise ExecutorError(f"runner {kind!r}: use 'ray' or 'inline'")
    from executor.engine.runner.ray_runner import RayRunner

    address = address or environ.get("RAY_ADDRESS")
    info("starting Ray…" if not address else f"joining Ray cluster at {address}…")
    return RayRunner(address=address, ship_code=environ.get("EXECUTOR_SHIP_CODE", "1") != "0",
                     shared_filesystem=environ.get("EXECUTOR_SHARED_FILESYSTEM") == "1", notify=warning)
