"""This process and Ray: loopback-only settings, whether Ray is up and which nodes it has, the
embedded local cluster.

Everything here runs on the driver before or while Ray starts: the environment that keeps an
embedded cluster on 127.0.0.1 (no cloud-metadata probes, no usage stats), free ports so several embedded clusters can
share a machine, starting one (retried once on a loaded machine), and which local code a remote
cluster has to be sent. Ray is imported inside functions only: some settings must precede it.

The loopback settings are Ray's environment variables, which Ray reads from `os.environ` while
`ray.init` starts the cluster (no argument takes them) and which its processes (GCS, raylet, and
through the raylet every worker) inherit then. They are given for the duration of that call only,
those the user did not set, and taken away after it (`loopback_environment`): the process's
environment is the same after a run as before it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import site
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from executor.core.errors import ExecutorError

if TYPE_CHECKING:
    from executor.engine.runner.cluster import NodeShape

LOOPBACK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    # Under `uv run`, Ray would ship the uv project as a runtime env and insist the experiment
    # file lives inside it; workers of an embedded cluster use the driver's virtualenv anyway.
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
}


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast when nothing listens at a `host:port` (or `ray://host:port`) cluster address:
    ray.init would retry for minutes, printing only low-level warnings. Other forms (`auto`)
    are left to Ray, which fails quickly when it finds no cluster."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise ExecutorError(f"could not reach the Ray cluster at {address!r} ({e.strerror or e}). Check the "
                            f"address (--ray-address / RAY_ADDRESS) and that the cluster is up "
                            f"(`ray status` on its head node).") from None


_ENVIRONMENT_LOCK = threading.Lock()  # two starts on two threads: one restores what it set, not the other's


@contextlib.contextmanager
def loopback_environment(settings: Mapping[str, str] = LOOPBACK_ENV) -> Iterator[dict[str, str]]:
    """`settings` the process's environment lacks, in it for the block (ray.init, which reads them
    there and hands them to the processes it starts), then taken out again; values the user set
    are left as they are. Yields the ones it added."""
    with _ENVIRONMENT_LOCK:
        added = {key: value for key, value in settings.items() if key not in os.environ}
        os.environ.update(added)
        try:
            yield added
        finally:
            for key, value in added.items():
                if os.environ.get(key) == value:
                    del os.environ[key]


def prepare_loopback_environment() -> None:
    """What keeps an embedded Ray cluster on 127.0.0.1 and off every other address, besides the
    variables `loopback_environment` gives ray.init: Ray probes cloud metadata addresses unless a
    bootstrap config exists in $HOME, so one is created when missing. Must run before ray.init.
    """
    bootstrap = Path(os.path.expanduser("~")) / "ray_bootstrap_config.yaml"
    if not bootstrap.exists():
        try:
            bootstrap.write_text("{}\n")
        except OSError:
            pass


def ray_is_active() -> bool:
    """True inside a Ray worker or a driver that has called ray.init."""
    ray = sys.modules.get("ray")  # not imported: neither (and importing it would cost half a second)
    return ray is not None and ray.is_initialized()


def alive_nodes() -> list["NodeShape"]:
    """The alive nodes of the cluster this process is connected to, with their total resources."""
    import ray

    from executor.engine.runner.cluster import NodeShape

    return [NodeShape(n["NodeID"], n.get("NodeManagerAddress", "?"), dict(n.get("Resources", {})))
            for n in ray.nodes() if n.get("Alive")]


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


def no_uv_runtime_env() -> None:
    """Ray ships a `uv run` driver's project to workers unless RAY_ENABLE_UV_RUN_RUNTIME_ENV=0
    (LOOPBACK_ENV). Ray reads that variable once, into a private constant, at `import ray`; only
    the constant can say so after that (no public API does), so it is set, and the process's
    environment is left alone."""
    from ray._private import ray_constants

    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False


def start_embedded(num_cpus: int | None, object_store_memory: int | None,
                   resources: dict[str, float] | None, tries: int = 2) -> None:
    """ray.init of a NEW local cluster on 127.0.0.1 (never one `ray start` left running on this machine,
    which a bare ray.init would join), with every fixed-by-default port made free.

    Ray's dashboard agent listens on 52365 by default and ray.init offers no way to change it,
    so a second cluster on the same machine (another experiment, a test run) fails to start.
    No public API sets it for a cluster ray.init starts: `ray start --dashboard-agent-listen-port`
    makes a cluster that outlives this process, and ray.cluster_utils.Cluster publishes its address
    machine-wide (a bare ray.init elsewhere would join it). So the port is passed through Ray's
    private RayParams for the duration of the call only, and only where RayParams still takes it.
    Under heavy load Ray's node can time out while its agents start (a raylet waits ~30 s for
    them); that is retried.
    """
    import ray
    from ray._private import parameter

    no_uv_runtime_env()
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
            with loopback_environment():
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
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
