"""A real `ray start --head` cluster for tests, started from its own directory and environment.

Never `ray stop` (it kills every Ray cluster on the machine, other people's test clusters
included): the head is started in a new session (its own process group) with a dedicated
--temp-dir, and stopped by signalling that process group, plus any straggler whose command
line names the temp dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class RayHead:
    def __init__(self, num_cpus: int = 4, resources: str = "{}", home: str | None = None):
        self.num_cpus, self.resources = num_cpus, resources
        self.root = Path(tempfile.mkdtemp(prefix="sgray-", dir="/tmp"))  # short: unix socket paths
        self.cwd = self.root / "head-cwd"
        self.cwd.mkdir()
        self.home = home or os.environ.get("HOME", str(self.root))
        self.pgid: int | None = None
        self.address = ""

    def environment(self) -> dict[str, str]:
        """Not the driver's: no virtualenv/PYTHONPATH/pytest variables, its own marker."""
        keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(HOME=self.home, RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
                   RAY_AUTH_MODE="disabled", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
                   STEPGRAPH_TEST_HEAD="1",
                   # gcsfs's emulator switch (not a credential: without it gcsfs probes a gRPC API
                   # fake-gcs-server lacks), and XLA's expensive CPU passes off: they cost the tiny
                   # test models far more compile time than they save (as in tests/steps/test_train.py).
                   GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
                   XLA_FLAGS="--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
        return env

    def start(self, timeout: float = 300, tries: int = 3) -> str:
        """Start the head; under heavy load Ray's raylet gives up on its agents after ~30 s, so a
        failed start is retried (in a fresh temp dir) a few times."""
        for attempt in range(1, tries + 1):
            try:
                return self._start_once(timeout)
            except RuntimeError:
                if attempt == tries:
                    raise
                self.stop(remove=False)

    def _start_once(self, timeout: float) -> str:
        port, *others = free_ports(7)
        cmd = [RAY, "start", "--head", f"--port={port}", f"--num-cpus={self.num_cpus}", f"--resources={self.resources}",
               "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
               f"--temp-dir={self.root / 'ray'}", "--object-store-memory=100000000",
               f"--metrics-export-port={others[0]}", f"--dashboard-agent-grpc-port={others[1]}",
               f"--dashboard-agent-listen-port={others[2]}", f"--runtime-env-agent-port={others[3]}",
               f"--ray-client-server-port={others[4]}", f"--dashboard-port={others[5]}"]
        log = open(self.root / "start.log", "wb")
        proc = subprocess.Popen(cmd, cwd=self.cwd, env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.pgid = proc.pid
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ray start did not finish in {timeout}s") from None
        if rc != 0:
            text = (self.root / "start.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"ray start failed ({rc}):\n{text}")
        self.address = f"127.0.0.1:{port}"
        return self.address

    def _stragglers(self) -> list[int]:
        marker = str(self.root).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def stop(self, remove: bool = True) -> None:
        if self.pgid is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.pgid, sig)
                except ProcessLookupError:
                    break
                time.sleep(1.0)
        for pid in self._stragglers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.pgid = None
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def start_nodes(count: int, cpus: int = 1, tries: int = 5):
    """A real multi-node Ray cluster on this machine (ray.cluster_utils.Cluster: a head and
    count-1 more nodes, `cpus` logical CPUs each), this process connected as its driver. Nodes are separate
    raylets, so Ray's placement treats them as separate machines: a multi-host step's hosts land
    on distinct nodes (STRICT_SPREAD), as on a real cluster. Under heavy load a node may time out
    while starting: the whole start is retried."""
    import ray
    from ray.cluster_utils import Cluster

    def node_args(k: int) -> dict:
        # the agents' default ports (52365, ...) may be taken by another Ray cluster on the machine
        agent, metrics, runtime_env = free_ports(3)
        return {"num_cpus": cpus, "resources": {f"node{k}": 1}, "object_store_memory": 80 << 20,
                "dashboard_agent_listen_port": agent, "metrics_export_port": metrics,
                "runtime_env_agent_port": runtime_env}

    for attempt in range(1, tries + 1):
        cluster = None
        try:
            cluster = Cluster(initialize_head=True, head_node_args={**node_args(0), "include_dashboard": False})
            for k in range(1, count):
                cluster.add_node(**node_args(k))
            ray.init(address=cluster.address, log_to_driver=False)
            cluster.wait_for_nodes()
            return cluster
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception when a node times out
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            if attempt == tries:
                raise
