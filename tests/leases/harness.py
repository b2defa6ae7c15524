"""Lease-proof helpers: executor subprocesses of dag_experiment.py, backends, evidence files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pytest



EXPERIMENT = Path(__file__).with_name("dag_experiment.py")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    name: str
    prefix: str
    options: dict[str, Any] = field(default_factory=dict)

    def fs(self):
        if not self.options:
            return fsspec.filesystem("file")
        return fsspec.core.url_to_fs(self.prefix, skip_instance_cache=True, **self.options)[0]

    def env(self, sidefx: Path, sleep_s: float, **extra: str) -> dict[str, str]:
        env = dict(os.environ, DAG_SIDEFX=str(sidefx), DAG_SLEEP_S=str(sleep_s), PYTHONUNBUFFERED="1",
                   COLUMNS="200", **extra)
        env.pop("EXECUTOR_STORAGE_OPTIONS", None)
        if self.options:
            env["EXECUTOR_STORAGE_OPTIONS"] = json.dumps(self.options)
        return env

    def statuses(self) -> dict[str, dict]:
        """step name (n00...) -> parsed status.json, read from storage."""
        fs = self.fs()
        out = {}
        for path in fs.glob(f"{self.prefix}/dag/*/.executor/status.json"):
            status = json.loads(fs.cat_file(path))
            out[status["step_id"].split("/")[-1].rsplit("-", 1)[0]] = status
        return out

    def record(self, step: str) -> dict:
        fs = self.fs()
        (path,) = fs.glob(f"{self.prefix}/dag/{step}-*/.executor/record.json")
        return json.loads(fs.cat_file(path))


def make_backend(name: str, tmp_path: Path, request) -> Backend:
    if name == "local":
        return Backend("local", str(tmp_path / "prefix"))
    emulator = request.getfixturevalue("gcs_emulator" if name == "gcs" else "s3_emulator")
    return Backend(name, emulator.fresh_prefix("lease"), dict(emulator.storage_options))


@pytest.fixture(params=["local", "gcs", pytest.param("s3", marks=pytest.mark.slow)])  # s3: ~40 s on 2 cores
def backend(request, tmp_path) -> Backend:
    return make_backend(request.param, tmp_path, request)


@pytest.fixture
def sidefx(tmp_path) -> Path:
    path = tmp_path / "sidefx"
    path.mkdir()
    return path


class Runner:
    """One executor subprocess of dag_experiment.py, its output in a log file."""

    def __init__(self, backend: Backend, sidefx: Path, log: Path, *args: str, sleep_s: float = 0.2,
                 ttl: float = 6, heartbeat: float = 1, env_extra: dict[str, str] | None = None):
        self.log = log
        argv = [sys.executable, str(EXPERIMENT), "--runner", "inline", "--prefix", backend.prefix,
                "--lease-ttl", str(ttl), "--heartbeat-interval", str(heartbeat), *args]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                         env=backend.env(sidefx, sleep_s, **(env_extra or {})))
        self.pid = self.proc.pid

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"executor {self.pid} did not finish in {timeout}s:\n{self.output()[-3000:]}")

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def events(sidefx: Path) -> dict[str, dict[str, list[dict]]]:
    """kind -> step -> event bodies (each from one uniquely named marker file)."""
    out: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for path in sidefx.iterdir():
        if path.name.startswith("."):
            continue  # a marker still being written (or whose writer was killed mid-write)
        kind, step, _pid, _uuid = path.name.split("-", 3)
        out[kind][step].append(json.loads(path.read_text()))
    return out


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")
