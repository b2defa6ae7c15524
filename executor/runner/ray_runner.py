"""The Ray runner: each step is a Ray task on an embedded local cluster or an existing one.

This is the only module that imports ray.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

LOOPBACK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    # Under `uv run`, Ray would ship the uv project as a runtime env and insist the experiment
    # file lives inside it; workers of an embedded cluster use the driver's virtualenv anyway.
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
}


def prepare_loopback_environment() -> None:
    """Settings that keep an embedded Ray cluster on 127.0.0.1 (see shared/ENVIRONMENT.md).

    Must run before ray.init. Ray probes cloud metadata addresses unless a bootstrap config
    exists in $HOME, so one is created when missing.
    """
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    bootstrap = Path(os.path.expanduser("~")) / "ray_bootstrap_config.yaml"
    if not bootstrap.exists():
        try:
            bootstrap.write_text("{}\n")
        except OSError:
            pass


def ray_is_active() -> bool:
    """True inside a Ray worker or a driver that has called ray.init."""
    try:
        import ray
    except ImportError:
        return False
    return ray.is_initialized()


def map_tasks(fn: Callable, items: list, *, num_cpus: float = 1, max_in_flight: int | None = None,
              on_done: Callable[[], None] | None = None) -> list[Any]:
    """Run fn over items as Ray tasks, at most `max_in_flight` at a time; results in item order."""
    import ray

    remote = ray.remote(num_cpus=num_cpus, max_retries=3)(fn)
    limit = max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-3)) * 2)
    results: list[Any] = [None] * len(items)
    pending: dict[Any, int] = {}
    next_index = 0
    try:
        while next_index < len(items) or pending:
            while next_index < len(items) and len(pending) < limit:
                pending[remote.remote(items[next_index])] = next_index
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
