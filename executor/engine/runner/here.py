"""What a step's own code asks of the runner it runs on: fan work out, and which node it is on.

Steps reach these through `executor.map_shards` and `executor.current_node`, never through Ray:
inside a Ray task the work becomes Ray tasks on the same cluster; elsewhere (the inline runner,
unit tests) it runs in order in this process, unless the auto runner started the step off Ray:
then the fan-out asks for Ray instead (runner/escalate.py).
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Sequence

from executor.engine.runner.escalate import ask_for_ray


def fan_out(fn: Callable[[Any], Any], items: Sequence[Any], *, num_cpus: float, max_in_flight: int | None,
            on_done: Callable[[], None]) -> list[Any]:
    """`[fn(item) for item in items]` on the runner this process runs under, `on_done()` per result."""
    from executor.engine.runner.ray_env import ray_is_active

    if ray_is_active():
        from executor.engine.runner.ray_map import map_tasks

        return map_tasks(fn, list(items), num_cpus=num_cpus, max_in_flight=max_in_flight, on_done=on_done)
    ask_for_ray(f"map_shards({getattr(fn, '__name__', fn)!s}, {len(items)} items)")  # auto runner, off Ray
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
