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


def _execute_remotely(call):  # runs in a Ray worker
    from executor.runner.inline import run_call

    return run_call(call)


class RayHandle:
    def __init__(self, call, ref):
        self.call, self.ref = call, ref
        self._outcome = None

    def done(self) -> bool:
        import ray

        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def outcome(self):
        import ray
        from ray.exceptions import RayError, RayTaskError, TaskCancelledError

        from executor.runner.base import StepOutcome

        if self._outcome is None:
            try:
                self._outcome = ray.get(self.ref)
            except TaskCancelledError:
                self._outcome = StepOutcome(ok=False, error="cancelled", infrastructure=True)
            except RayTaskError as e:  # an exception outside the user function (e.g. unpickling)
                self._outcome = StepOutcome(ok=False, error=f"{type(e.cause).__name__}: {e.cause}",
                                            traceback=str(e)[-4000:])
            except RayError as e:  # worker died, node lost, object lost: infrastructure
                self._outcome = StepOutcome(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}",
                                            infrastructure=True)
        return self._outcome

    def cancel(self) -> None:
        import ray

        ray.cancel(self.ref, force=True)


class RayRunner:
    """Submits each step as a Ray task with its declared resources.

    Without an address an embedded cluster starts on 127.0.0.1; with one (`auto`, `ray://...`)
    the runner joins that cluster. Infrastructure failures are retried by Ray up to the step's
    `max_infra_retries`; exceptions in the step's own code are not retried by Ray.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 object_store_memory: int | None = 1 << 30):
        if not address:
            prepare_loopback_environment()  # before `import ray`: it reads some settings at import
        import ray
        from ray._private import ray_constants

        self.started_here = not ray.is_initialized()
        if self.started_here:
            if address:
                ray.init(address=address, log_to_driver=True)
            else:
                ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False  # in case ray was imported earlier
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
                         object_store_memory=object_store_memory, _node_ip_address="127.0.0.1")
        self._remote = ray.remote(_execute_remotely)

    def submit(self, call) -> RayHandle:
        r = call.resources
        options = dict(num_cpus=r.cpus, num_gpus=r.gpus, max_retries=r.max_infra_retries,
                       retry_exceptions=False, name=call.step_id)
        if r.memory_bytes:
            options["memory"] = r.memory_bytes
        if r.custom:
            options["resources"] = dict(r.custom)
        env = {**r.env, **call.env}
        if env:
            options["runtime_env"] = {"env_vars": env}
        return RayHandle(call, self._remote.options(**options).remote(call))

    def wait(self, handles, timeout: float):
        import ray

        if not handles:
            return []
        by_ref = {h.ref: h for h in handles}
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if ready:  # collect everything else that is ready too, without waiting
            ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        return [by_ref[r] for r in ready]

    def shutdown(self) -> None:
        import ray

        if self.started_here:
            ray.shutdown()
