"""Shard-level parallelism for step functions, through the runner the step itself runs on.

A step calls `map_shards(fn, items)`; the runner it runs on fans the calls out (runner/here.py:
inside a Ray task, many small Ray tasks on the same cluster; under the auto runner off Ray, the
step is moved to Ray first; elsewhere (`--runner inline`), in order in the step's process).
Neither steps nor this module know Ray.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from executor.engine.worker.progress import Progress
from executor.engine.runner.here import fan_out

T = TypeVar("T")
R = TypeVar("R")


def map_shards(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    desc: str | None = None,
    num_cpus: float = 1,
    max_in_flight: int | None = None,
) -> list[R]:
    """`[fn(item) for item in items]`, run in parallel when the step runs on a cluster.

    Results come back in the order of `items`. `fn` must be importable (module level) so that it
    can travel to workers. An exception in any call is raised here, after in-flight calls end.
    """
    progress = Progress(desc or getattr(fn, "__name__", "shards"), total=len(items), unit="shards")
    results = fan_out(fn, items, num_cpus=num_cpus, max_in_flight=max_in_flight, on_done=progress.update)
    progress.close()
    return results
