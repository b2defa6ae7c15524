"""Shard fan-out as Ray tasks, for `executor.engine.worker.parallel.map_shards` called inside a step on Ray.

A shard task whose worker keeps dying (killed for memory, node lost) is retried `max_retries`
times by Ray; after that the step fails with `ShardTaskDied`, naming the shard, the attempts and
the likely cause. A per-shard request larger than the largest node fails at once, naming both; when
no node of the cluster can run a shard task any more, the step fails after `unschedulable_timeout_s`
instead of waiting forever.
"""

from __future__ import annotations

import time
from typing import Any, Callable

MAX_RETRIES = 3


class ShardTaskDied(RuntimeError):
    """A shard task could not finish: its worker died on every attempt, or no node can run it."""


def _describe(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 200 else text[:197] + "..."


def _death_cause(error: BaseException) -> str:
    import ray.exceptions as rex

    if isinstance(error, getattr(rex, "OutOfMemoryError", ())):
        return "killed by Ray's memory monitor (out of memory): give the step's shards less data or more memory"
    if isinstance(error, getattr(rex, "NodeDiedError", ())) or "node" in str(error).lower() and "died" in str(error).lower():
        return "its node died (node lost or preempted)"
    return ("its worker process died (killed by the OS out-of-memory killer, a signal, or a crash in "
            "native code); check the node's memory and the worker logs")


def _refuse_if_no_node_fits(name: str, num_cpus: float) -> None:
    """Ray would queue tasks no node can run forever, printing only autoscaler lines: fail now."""
    from executor.engine.runner.cluster import describe_cluster, fits
    from executor.engine.runner.ray_env import alive_nodes

    nodes = alive_nodes()
    if any(fits({"CPU": num_cpus}, node) for node in nodes):
        return
    largest = max((node.resources.get("CPU", 0.0) for node in nodes), default=0.0)
    raise ShardTaskDied(
        f"{name}: each shard task asks for {num_cpus:g} CPU, but the largest live node of the cluster has "
        f"{largest:g}: no node can ever run it. Ask for at most {largest:g} CPU per shard (the step's "
        f"per-shard CPU setting, e.g. num_cpus_per_shard) or add larger nodes; {describe_cluster(nodes)}.")


def map_tasks(fn: Callable, items: list, *, num_cpus: float = 1, max_in_flight: int | None = None,
              on_done: Callable[[], None] | None = None, max_retries: int = MAX_RETRIES,
              unschedulable_timeout_s: float = 120.0) -> list[Any]:
    """Run fn over items as Ray tasks, at most `max_in_flight` at a time; results in item order."""
    import ray
    import ray.exceptions as rex

    from executor.engine.prefix import location
    from executor.engine.runner.ray_tasks import run_shard

    name = getattr(fn, "__name__", "shard task")
    _refuse_if_no_node_fits(name, num_cpus)
    # Shards open paths like their step does: the step's storage options go with each task (one
    # object in Ray's store, hidden from reprs), the shard's storage while fn runs in the worker.
    storage, fn_ref = ray.put(location.current_storage()), ray.put(fn)
    # SPREAD: shard tasks are independent and read their input from storage, so every node should
    # take its share; Ray's default packs the driver's node first (until half its CPUs are busy), and
    # short shard tasks then all ran on one node of a cluster (seen in CI on a loaded machine).
    remote = ray.remote(num_cpus=num_cpus, max_retries=max_retries)(run_shard).options(
        name=getattr(fn, "__qualname__", "shard"), scheduling_strategy="SPREAD")
    limit = max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-3)) * 2)
    results: list[Any] = [None] * len(items)
    pending: dict[Any, int] = {}
    next_index = 0
    died = (rex.WorkerCrashedError, rex.NodeDiedError, getattr(rex, "OutOfMemoryError", rex.WorkerCrashedError),
            getattr(rex, "TaskUnschedulableError", rex.WorkerCrashedError))
    no_capacity_since: float | None = None
    try:
        while next_index < len(items) or pending:
            while next_index < len(items) and len(pending) < limit:
                pending[remote.remote(storage, fn_ref, items[next_index])] = next_index
                next_index += 1
            done, _ = ray.wait(list(pending), num_returns=1, timeout=5.0)
            if not done:
                # Nothing finished: fail (never hang) when no live node could run a task at all.
                if ray.cluster_resources().get("CPU", 0) + 1e-9 < num_cpus:
                    no_capacity_since = no_capacity_since or time.monotonic()
                    if time.monotonic() - no_capacity_since > unschedulable_timeout_s:
                        index = min(pending.values())
                        raise ShardTaskDied(
                            f"{name}: shard {index} of {len(items)} ({_describe(items[index])}) cannot run: "
                            f"no live node has {num_cpus} CPU for {unschedulable_timeout_s:.0f} s "
                            f"(nodes lost?); the step is stopped instead of waiting forever")
                else:
                    no_capacity_since = None
                continue
            for ref in done:
                index = pending.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except died as e:
                    raise ShardTaskDied(
                        f"{name}: shard {index} of {len(items)} ({_describe(items[index])}) died on all "
                        f"{max_retries + 1} attempts; likely cause: {_death_cause(e)} "
                        f"[{type(e).__name__}]") from None
                if on_done:
                    on_done()
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return results
