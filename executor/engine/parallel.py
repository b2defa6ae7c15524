"""Shard-level parallelism for step functions, through the runner the step itself runs on.

A step calls `map_shards(fn, items)`; inside a Ray task this becomes many small Ray tasks on the
same cluster, elsewhere (in-process runner, unit tests) it runs the calls in order in-process.
Steps never import Ray themselves.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from executor.engine.progress import Progress

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
    from executor.engine.runner import ray_runner

    progress = Progress(desc or getattr(fn, "__name__", "shards"), total=len(items), unit="shards")
    if ray_runner.ray_is_active():
        results = ray_runner.map_tasks(fn, list(items), num_cpus=num_cpus,
                                       max_in_flight=max_in_flight, on_done=progress.update)
    else:
        results = []
        for item in items:
            results.append(fn(item))
            progress.update()
    progress.close()
    return results
