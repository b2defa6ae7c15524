"""The Ray runner: each step is a Ray task (or a placement group of host tasks) on a cluster.

This is the only module that imports ray. It starts an embedded loopback-only cluster when no
address is given, or joins an existing one (`auto`, `ray://host:port`, an address) and then
ships the experiment's local code to the workers through Ray's runtime environment. Retries are
decided here, by cause: a dead worker / lost node is retried with backoff up to the step's
`max_infra_retries`; an exception in the step's own code comes back as a failed outcome (the
run loop retries it only if `retry_user_errors` asks). Every try is recorded with its cause.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import site
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from executor.errors import ExecutorError
from executor.runner import cluster
from executor.runner.base import StepCall, StepOutcome
from executor.runner.capture import captured_output, log_path
from executor.step import Resources

LOOPBACK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    # Under `uv run`, Ray would ship the uv project as a runtime env and insist the experiment
    # file lives inside it; workers of an embedded cluster use the driver's virtualenv anyway.
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
}
BACKOFF_CAP_S = 60.0


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


def free_ports(count: int) -> list[int]:
    """Distinct TCP ports free right now on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def local_code_paths() -> list[str]:
    """Top-level modules/packages imported by this process that are not installed in the
    interpreter (i.e. the project's and the experiment's own code): what a remote cluster
    whose image lacks them needs as `py_modules`."""
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                             *site.getsitepackages(), site.getusersitepackages())}
    paths: set[str] = set()
    for name, module in list(sys.modules.items()):
        if "." in name or name == "__main__" or module is None:
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        resolved = Path(file).resolve()
        if any(resolved.is_relative_to(root) for root in installed):
            continue
        path = resolved.parent if resolved.name == "__init__.py" else resolved
        if path.is_dir() or path.suffix == ".py":
            paths.add(str(path))
    return sorted(paths)


# -- code that runs in Ray workers ---------------------------------------------------------
def _execute_remotely(call: StepCall, log: str | None, header: str) -> StepOutcome:
    from executor.runner.inline import run_call

    with captured_output(log, header):
        return run_call(call)


def _execute_host(call: StepCall, log: str | None, header: str, host: Any) -> StepOutcome:
    """One process of a multi-host step: bootstrap jax.distributed, then run the function."""
    from executor import multihost
    from executor.runner.inline import run_call

    with captured_output(log, header):
        try:
            multihost.initialize(host)
        except Exception as e:  # noqa: BLE001 - the group could not form: not the step's fault
            return StepOutcome(ok=False, error=f"multi-host bootstrap failed on process {host.process_id}: "
                                               f"{type(e).__name__}: {e}", infrastructure=True)
        try:
            return run_call(call)
        finally:
            try:
                multihost.shutdown()
            except Exception:  # noqa: BLE001 - the worker process exits after this task anyway
                pass


def _coordinator_address() -> str:
    import ray

    from executor.multihost import free_port

    return f"{ray.util.get_node_ip_address()}:{free_port()}"


# -- outcomes ------------------------------------------------------------------------------
def _classify(error: BaseException) -> tuple[str, StepOutcome]:
    """(cause, outcome) for an exception raised by ray.get on a step's task."""
    from ray import exceptions as rex

    if isinstance(error, rex.TaskCancelledError):
        return "cancelled", StepOutcome(ok=False, error="cancelled", infrastructure=True)
    if isinstance(error, rex.RayTaskError):  # outside the user function: e.g. unpickling the call
        cause = getattr(error, "cause", None) or error
        return "user", StepOutcome(ok=False, error=f"{type(cause).__name__}: {cause}"[:2000],
                                   traceback=str(error)[-4000:])
    if isinstance(error, (rex.RuntimeEnvSetupError, rex.TaskUnschedulableError)):
        return "config", StepOutcome(ok=False, error=f"{type(error).__name__}: {str(error)[:1500]}")
    # WorkerCrashedError, NodeDiedError, OutOfMemoryError, ObjectLostError, RaySystemError, ...
    return "infrastructure", StepOutcome(ok=False, error=f"{type(error).__name__}: {str(error)[:500]}",
                                         infrastructure=True)


def _cause_of(outcome: StepOutcome) -> str:
    if outcome.ok:
        return "ok"
    return "infrastructure" if outcome.infrastructure else "user"


class RayHandle:
    """One step on Ray, across its tries. A small state machine advanced by `poll`:

    single host: run -> done | backoff -> run ...
    multi-host:  placement group -> coordinator address -> host tasks -> done | backoff -> ...
    """

    def __init__(self, runner: "RayRunner", call: StepCall):
        self.runner, self.call = runner, call
        self.tries: list[dict[str, Any]] = []
        self._outcome: StepOutcome | None = None
        self._phase = "new"
        self._refs: list[Any] = []
        self._results: dict[int, StepOutcome] = {}
        self._pg = None
        self._retry_at = 0.0
        self._try_started = 0.0
        self._cancelled = False
        self._launch()

    # -- what the runner looks at ----------------------------------------------------------
    @property
    def hosts(self) -> int:
        return max(1, int(self.call.resources.hosts))

    def refs(self) -> list[Any]:
        return [] if self._outcome is not None else list(self._refs)

    def wake_at(self) -> float | None:
        return self._retry_at if self._outcome is None and self._phase == "backoff" else None

    # -- launching -------------------------------------------------------------------------
    def _log(self) -> tuple[str | None, str]:
        if not self.runner.capture_logs:
            return None, ""
        n = len(self.tries) + 1
        return (log_path(self.call.output_path, self.call.attempt),
                f"{self.call.step_id} attempt {self.call.attempt} try {n}")

    def _launch(self) -> None:
        self._try_started = time.monotonic()
        self._results = {}
        if self.hosts == 1:
            log, header = self._log()
            options = self.runner.task_options(self.call)
            self._refs = [self.runner.remote_step.options(**options).remote(self.call, log, header)]
            self._phase = "run"
        else:
            from ray.util.placement_group import placement_group

            bundle = self.runner.bundle(self.call.resources)
            self._pg = placement_group([dict(bundle) for _ in range(self.hosts)],
                                       strategy=self.runner.multihost_strategy)
            self._refs = [self._pg.ready()]
            self._phase = "placement"

    def _in_bundle(self, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=index,
                                                placement_group_capture_child_tasks=False)

    def _launch_hosts(self, coordinator: str) -> None:
        from executor.multihost import HostContext

        log, header = self._log()
        self._refs = []
        for i in range(self.hosts):
            options = self.runner.task_options(self.call, name=f"{self.call.step_id}[host {i}]")
            options["scheduling_strategy"] = self._in_bundle(i)
            host = HostContext(coordinator, self.hosts, i)
            host_log = log if (log is None or i == 0) else log.replace(".log", f".host{i}.log")
            self._refs.append(self.runner.remote_host.options(**options).remote(
                self.call, host_log, f"{header} host {i}/{self.hosts}", host))
        self._phase = "hosts"

    # -- advancing -------------------------------------------------------------------------
    def poll(self, ready: set | None = None) -> bool:
        """Advance without blocking; True once the step's outcome is known."""
        import ray

        if self._outcome is not None:
            return True
        if self._phase == "backoff":
            if time.monotonic() >= self._retry_at:
                self._launch()
            return False
        if ready is None:
            ready = set(ray.wait(self._refs, num_returns=len(self._refs), timeout=0)[0]) if self._refs else set()
        finished = [r for r in self._refs if r in ready]
        if not finished:
            return False
        if self._phase == "run":
            self._end_try(*self._get(finished[0]))
        elif self._phase == "placement":
            coordinator_task = ray.remote(_coordinator_address).options(
                num_cpus=0, max_retries=2, scheduling_strategy=self._in_bundle(0))
            self._refs = [coordinator_task.remote()]
            self._phase = "coordinator"
        elif self._phase == "coordinator":
            try:
                address = ray.get(finished[0])
            except Exception as e:  # noqa: BLE001
                self._end_try(*_classify(e))
                return self._outcome is not None
            self._launch_hosts(address)
        elif self._phase == "hosts":
            for ref in finished:
                index = self._refs.index(ref)
                if index in self._results:
                    continue
                cause, outcome = self._get(ref)
                self._results[index] = outcome
                if not outcome.ok:  # one host failing fails the step: stop the others
                    host = f"host {index}: " if index else "host 0: "
                    self._stop_tasks()
                    self._end_try(cause, dataclasses.replace(outcome, error=host + (outcome.error or "failed")))
                    return self._outcome is not None
            if len(self._results) == self.hosts:
                self._end_try("ok", self._results[0])
        return self._outcome is not None

    def _get(self, ref: Any) -> tuple[str, StepOutcome]:
        import ray

        try:
            outcome = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - classified by cause
            return _classify(e)
        return _cause_of(outcome), outcome

    def _end_try(self, cause: str, outcome: StepOutcome) -> None:
        if self._cancelled:
            cause, outcome = "cancelled", StepOutcome(ok=False, error="cancelled", infrastructure=True)
        self.tries.append({"try": len(self.tries) + 1, "cause": cause, "error": outcome.error,
                           "seconds": round(time.monotonic() - self._try_started, 3), "hosts": self.hosts})
        self._release_group()
        self._refs = []
        infra_failures = sum(t["cause"] == "infrastructure" for t in self.tries)
        if cause == "infrastructure" and infra_failures <= self.call.resources.max_infra_retries:
            delay = min(BACKOFF_CAP_S, self.runner.retry_backoff_s * 2 ** (infra_failures - 1))
            self.runner.notify(f"{self.call.step_id}: infrastructure failure ({outcome.error}); "
                               f"retry {infra_failures}/{self.call.resources.max_infra_retries} in {delay:.1f}s")
            self._phase, self._retry_at = "backoff", time.monotonic() + delay
            return
        if cause == "infrastructure":
            outcome = dataclasses.replace(
                outcome, error=f"{outcome.error} (gave up after {infra_failures} infrastructure failure(s))")
        self._phase = "done"
        self._outcome = dataclasses.replace(outcome, attempts=tuple(self.tries))

    # -- stopping --------------------------------------------------------------------------
    def _stop_tasks(self) -> None:
        import ray

        for ref in self._refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished, or not a task (placement)
                pass

    def _release_group(self) -> None:
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001
                pass
            self._pg = None

    def cancel(self) -> None:
        if self._outcome is not None:
            return
        self._cancelled = True
        self._stop_tasks()
        self._end_try("cancelled", StepOutcome(ok=False, error="cancelled", infrastructure=True))

    # -- the StepHandle protocol -----------------------------------------------------------
    def done(self) -> bool:
        return self.poll()

    def outcome(self) -> StepOutcome:
        while not self.poll():
            self.runner.wait([self], timeout=1.0)
        assert self._outcome is not None
        return self._outcome


class RayRunner:
    """Submits each step as a Ray task (or a placement group of host tasks) with its resources.

    Without an address an embedded cluster starts on 127.0.0.1 (on free ports, so several can
    share a machine); with one (`auto`, `ray://...`, `host:port`) the runner joins that cluster
    and, unless `ship_code` is off, sends this process's local code as runtime-env py_modules.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 object_store_memory: int | None = 1 << 30, *, ship_code: bool = True,
                 shared_filesystem: bool = False, colocate_hosts: bool = False,
                 retry_backoff_s: float = 2.0, capture_logs: bool = True,
                 resources: dict[str, float] | None = None,
                 notify: Callable[[str], None] | None = None):
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # see shared/ENVIRONMENT.md
        if not address:
            prepare_loopback_environment()  # before `import ray`: it reads some settings at import
        import ray
        from ray._private import ray_constants

        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False  # in case ray was imported earlier
        self.address = address
        self.shared_filesystem, self.colocate_hosts = shared_filesystem, colocate_hosts
        self.retry_backoff_s, self.capture_logs = retry_backoff_s, capture_logs
        self.notify = notify or (lambda message: print(message, file=sys.stderr))
        self.shipped: list[str] = []
        self.started_here = not ray.is_initialized()
        if self.started_here:
            if address:
                runtime_env: dict[str, Any] = {}
                if ship_code:
                    self.shipped = local_code_paths()
                    runtime_env = {"py_modules": self.shipped, "excludes": ["__pycache__", "*.pyc"]}
                try:
                    ray.init(address=address, log_to_driver=True, runtime_env=runtime_env or None)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise ExecutorError(f"could not join the Ray cluster at {address!r}: {e}. Check the "
                                        f"address (--ray-address / RAY_ADDRESS) and that the cluster is up.") from None
            else:
                _start_embedded(num_cpus, object_store_memory, resources)
        self.remote_step = ray.remote(_execute_remotely)
        self.remote_host = ray.remote(max_calls=1)(_execute_host)  # jax.distributed is once per process

    # -- cluster shape and plan-time checks ------------------------------------------------
    def nodes(self) -> list[cluster.NodeShape]:
        import ray

        return [cluster.NodeShape(n["NodeID"], n.get("NodeManagerAddress", "?"), dict(n.get("Resources", {})))
                for n in ray.nodes() if n.get("Alive")]

    def check_steps(self, steps: Iterable[tuple[str, Resources]], *, prefix_is_local: bool) -> list[str]:
        """Every reason these steps could never run on this cluster (empty when all can)."""
        return cluster.check_steps(list(steps), self.nodes(), prefix_is_local=prefix_is_local,
                                   shared_filesystem=self.shared_filesystem, colocate_hosts=self.colocate_hosts)

    @property
    def multihost_strategy(self) -> str:
        return cluster.placement_strategy(self.colocate_hosts)

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
        import ray

        if self.started_here and ray.is_initialized():
            ray.shutdown()


def _start_embedded(num_cpus: int | None, object_store_memory: int | None,
                    resources: dict[str, float] | None, tries: int = 2) -> None:
    """ray.init of a local cluster on 127.0.0.1, with every fixed-by-default port made free.

    Ray's dashboard agent listens on 52365 by default and ray.init offers no way to change it,
    so a second cluster on the same machine (another experiment, a test run) fails to start.
    The port is passed through RayParams for the duration of the call. Under heavy load Ray's
    node can time out while its agents start (a raylet waits ~30 s for them); that is retried.
    """
    import ray
    from ray._private import parameter

    agent_port, dashboard_port, metrics_port = free_ports(3)
    original = parameter.RayParams.__init__
    patch = "dashboard_agent_listen_port" in inspect.signature(original).parameters

    def init_with_free_agent_port(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("dashboard_agent_listen_port", agent_port)
        original(self, *args, **kwargs)

    import psutil

    for attempt in range(1, tries + 1):
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        if patch:
            parameter.RayParams.__init__ = init_with_free_agent_port
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
                     object_store_memory=object_store_memory, _node_ip_address="127.0.0.1",
                     dashboard_port=dashboard_port, _metrics_export_port=metrics_port, resources=resources)
            return
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception when its node times out
            ray.shutdown()
            for child in psutil.Process().children(recursive=True):  # what the failed start left behind
                if child.pid not in before:
                    try:
                        child.kill()
                    except psutil.Error:
                        pass
            if attempt == tries:
                raise ExecutorError(f"could not start an embedded Ray cluster ({tries} tries): {e}. On a heavily "
                                    f"loaded machine Ray's node can time out while starting; try again.") from None
            agent_port, dashboard_port, metrics_port = free_ports(3)
        finally:
            if patch:
                parameter.RayParams.__init__ = original
