"""Shard fan-out as Ray tasks, for `executor.engine.parallel.map_shards` called inside a step on Ray."""

from __future__ import annotations

from typing import Any, Callable


def map_tasks(fn: Callable, items: list, *, num_cpus: float = 1, max_in_flight: int | None = None,
              on_done: Callable[[], None] | None = None) -> list[Any]:
    """Run fn over items as Ray tasks, at most `max_in_flight` at a time; results in item order."""
    import ray

    from executor.engine import location
    from executor.engine.runner.ray_tasks import run_shard

    # Shards open paths like their step does: the step's storage options go with each task (one
    # object in Ray's store, hidden from reprs), registered in the worker before fn runs.
    storage, fn_ref = ray.put(location.registered_storage_options()), ray.put(fn)
    remote = ray.remote(num_cpus=num_cpus, max_retries=3)(run_shard).options(
        name=getattr(fn, "__qualname__", "shard"))
    limit = max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-3)) * 2)
    results: list[Any] = [None] * len(items)
    pending: dict[Any, int] = {}
    next_index = 0
    try:
        while next_index < len(items) or pending:
            while next_index < len(items) and len(pending) < limit:
                pending[remote.remote(storage, fn_ref, items[next_index])] = next_index
                next_index += 1
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                results[pending.pop(ref)] = ray.get(ref)
                if on_done:
                    on_done()
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return results
