"""What a step's own code asks of the runner it runs on: fan work out, and which node it is on.

Steps reach these through `executor.map_shards` and `executor.current_node`, never through Ray:
inside a Ray task the work becomes Ray tasks on the same cluster; elsewhere (the inline runner,
unit tests) it runs in order in this process. A step the auto runner started off Ray (in an
inline child, under `ray_on_fan_out`) is stopped at its first fan-out instead: `NeedsRay` ends
it, and the auto runner runs it again, from its start, on Ray (executor/engine/runner/auto.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
from typing import Any, Callable, Iterator, Sequence

# Set (to a one-item list, the "asked" flag) in an inline child of the auto runner while its step
# runs: a ContextVar, not a module global, as for the step's storage options (engine/location.py).
_FAN_OUT_ASKS_RAY: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "stepgraph_fan_out_asks_ray", default=None)


class NeedsRay(BaseException):
    """Raised by a fan-out in a step the auto runner started off Ray: the step is run again on Ray.
    A BaseException, so that a step's `except Exception` does not swallow it."""


@contextlib.contextmanager
def ray_on_fan_out() -> Iterator[list[bool]]:
    """While the block runs, a fan-out sets the yielded flag and raises NeedsRay."""
    asked = [False]
    token = _FAN_OUT_ASKS_RAY.set(asked)
    try:
        yield asked
    finally:
        _FAN_OUT_ASKS_RAY.reset(token)


def fan_out(fn: Callable[[Any], Any], items: Sequence[Any], *, num_cpus: float, max_in_flight: int | None,
            on_done: Callable[[], None]) -> list[Any]:
    """`[fn(item) for item in items]` on the runner this process runs under, `on_done()` per result."""
    from executor.engine.runner.ray_env import ray_is_active

    if ray_is_active():
        from executor.engine.runner.ray_map import map_tasks

        return map_tasks(fn, list(items), num_cpus=num_cpus, max_in_flight=max_in_flight, on_done=on_done)
    asked = _FAN_OUT_ASKS_RAY.get()
    if asked is not None:
        asked[0] = True
        raise NeedsRay(f"map_shards({getattr(fn, '__name__', fn)!s}, {len(items)} items) fans work out: "
                       f"the step runs again on Ray")
    results = []
    for item in items:
        results.append(fn(item))
        on_done()
    return results


def current_node() -> str:
    """The node running this code: its Ray node id on a cluster (several nodes may share a host),
    else the host name."""
    from executor.engine.runner.ray_env import ray_is_active

    if ray_is_active():
        import ray

        return ray.get_runtime_context().get_node_id()
    return socket.gethostname()
