"""The Ray runner: each step is a Ray task (or a placement group of host tasks) on a cluster.

It starts an embedded loopback-only cluster when no address is given, or joins an existing one
(`auto`, `ray://host:port`, an address) and then ships the experiment's local code to the workers
through Ray's runtime environment. Retries are decided per step by RayHandle, by cause: a dead
worker / lost node is retried with backoff up to the step's `max_infra_retries`; an exception in
the step's own code comes back as a failed outcome (the run loop retries it only if
`retry_user_errors` asks). Every try is recorded with its cause.

The ray_* modules of this package are the only ones that import ray: ray_env (loopback settings,
the embedded cluster), ray_tasks (what runs in workers), ray_handle (one step's tries), ray_map
(shard fan-out) and this one. `map_tasks`, `ray_is_active` and `prepare_loopback_environment`
stay importable from here for tests and scripts.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from executor.core.errors import ExecutorError
from executor.engine.runner import cluster, log_forwarding
from executor.engine.runner.base import StepCall
from executor.engine.runner.ray_env import (alive_nodes, check_reachable, local_code_paths, no_uv_runtime_env,
                                            prepare_loopback_environment, ray_is_active, start_embedded)
from executor.engine.runner.ray_handle import RayHandle
from executor.engine.runner.ray_map import map_tasks
from executor.engine.runner.ray_tasks import execute_host, execute_remotely
from executor.core.step import Resources

__all__ = ["RayHandle", "RayRunner", "map_tasks", "prepare_loopback_environment", "ray_is_active"]


class RayRunner:
    """Submits each step as a Ray task (or a placement group of host tasks) with its resources.

    Without an address an embedded cluster starts on 127.0.0.1 (on free ports, so several can
    share a machine); with one (`auto`, `ray://...`, `host:port`) the runner joins that cluster
    and, unless `ship_code` is off, sends this process's local code as runtime-env py_modules.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 object_store_memory: int | None = 1 << 30, *, ship_code: bool = True,
                 shared_filesystem: bool = False,
                 retry_backoff_s: float = 2.0, capture_logs: bool = True,
                 resources: dict[str, float] | None = None,
                 notify: Callable[[str], None] | None = None):
        if not address:
            prepare_loopback_environment()  # its variables are given to ray.init only (ray_env.loopback_environment)
        no_uv_runtime_env()  # under `uv run`, Ray would ship the project and demand it be the working dir
        import ray

        self.address = address
        self.shared_filesystem = shared_filesystem
        self.retry_backoff_s, self.capture_logs = retry_backoff_s, capture_logs
        self.notify = notify or (lambda message: print(message, file=sys.stderr))
        self.shipped: list[str] = []
        self.started_here = LIBRARY_RAY.enter(lambda: self._start(address, ship_code, num_cpus,
                                                                  object_store_memory, resources))
        try:
            log_forwarding.install()  # step output complete before its ✔ line
        except Exception as e:  # noqa: BLE001 - Ray's internals moved: keep its own printer, say so
            self.notify(f"stepgraph: step output may trail its ✔ line (could not wrap Ray's log printer: {e})")
        self.remote_step = ray.remote(execute_remotely)
        self.remote_host = ray.remote(max_calls=1)(execute_host)  # jax.distributed is once per process

    def _start(self, address: str | None, ship_code: bool, num_cpus: int | None, object_store_memory: int | None,
               resources: dict[str, float] | None) -> None:
        import ray

        if not address:
            start_embedded(num_cpus, object_store_memory, resources)
            return
        runtime_env: dict[str, Any] = {}
        if ship_code:
            self.shipped = local_code_paths()
            runtime_env = {"py_modules": self.shipped, "excludes": ["__pycache__", "*.pyc"]}
        check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=True, runtime_env=runtime_env or None)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ExecutorError(f"could not join the Ray cluster at {address!r}: {e}. Check the "
                                f"address (--ray-address / RAY_ADDRESS) and that the cluster is up.") from None

    # -- cluster shape and plan-time checks ------------------------------------------------
    def nodes(self) -> list[cluster.NodeShape]:
        return alive_nodes()

    def check_steps(self, steps: Iterable[tuple[str, Resources]], *, prefix_is_local: bool) -> list[str]:
        """Every reason these steps could never run on this cluster (empty when all can)."""
        return cluster.check_steps(list(steps), self.nodes(), prefix_is_local=prefix_is_local,
                                   shared_filesystem=self.shared_filesystem)

    @staticmethod
    def bundle(r: Resources) -> dict[str, float]:
        return cluster.demand(r) or {"CPU": 0.01}

    def task_options(self, call: StepCall, name: str | None = None) -> dict[str, Any]:
        r = call.resources
        options: dict[str, Any] = dict(num_cpus=r.cpus, num_gpus=r.gpus, max_retries=0,
                                       retry_exceptions=False, name=name or call.step_id)
        if r.memory_bytes:
            options["memory"] = r.memory_bytes
        if r.custom:
            options["resources"] = dict(r.custom)
        env = {**r.env, **call.env}
        if env:
            options["runtime_env"] = {"env_vars": env}
        return options

    # -- the Runner protocol ---------------------------------------------------------------
    def submit(self, call: StepCall) -> RayHandle:
        return RayHandle(self, call)

    def wait(self, handles: Sequence[RayHandle], timeout: float) -> list[RayHandle]:
        import ray

        if not handles:
            return []
        deadline = time.monotonic() + timeout
        while True:
            refs = [r for h in handles for r in h.refs()]
            ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
            done = [h for h in handles if h.poll(ready)]
            if done:
                return done
            now = time.monotonic()
            if now >= deadline:
                return []
            wakes = [w for w in (h.wake_at() for h in handles) if w is not None]
            pause = max(0.0, min([deadline - now, *(w - now for w in wakes)]))
            refs = [r for h in handles for r in h.refs()]
            if refs:
                ray.wait(refs, num_returns=1, timeout=pause)
            else:
                time.sleep(pause)

    def shutdown(self) -> None:
        """Stop using Ray (once per runner; again is a no-op). The library's Ray is shut down when
        the last run using it ends, never under another; a Ray the caller started is left running."""
        if self.started_here:
            self.started_here = False
            LIBRARY_RAY.leave()


class LibraryRay:
    """The Ray connection this library opened in this process (an embedded cluster, or a joined
    one), shared by every run that uses it meanwhile: the last of them to end shuts it down. Ray's
    connection is process-wide, so this count is too (the one module-level object of the runner);
    a Ray the caller started is never counted, nor shut down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.users = 0  # runs using the Ray this library started

    def enter(self, start: Callable[[], None]) -> bool:
        """Use Ray: started by `start` (under the lock: a second run waits, then shares it) unless it
        is up. True when it is the library's, to be left with `leave`."""
        import ray

        with self._lock:
            if self.users == 0:
                if ray.is_initialized():
                    return False  # the caller's
                start()
            self.users += 1
            return True

    def leave(self) -> None:
        import ray

        with self._lock:
            self.users -= 1
            if self.users == 0 and ray.is_initialized():
                ray.shutdown()


LIBRARY_RAY = LibraryRay()

