"""Helpers for the endings tests: gated.py runs as a real executor subprocess, and the store is
checked after it ends: no RUNNING lease without a live holder, the run file's exit code, and
committed outputs byte-identical to their manifests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from executor.tools.verify import verify_path
from executor.engine.prefix.prefixes import open_prefix
from tests.leases.harness import Backend

GATED = Path(__file__).with_name("gated.py")
REPO = Path(__file__).resolve().parents[2]
TTL, HEARTBEAT = 6, 1  # short leases: a paused or killed holder is taken over in seconds (slack for a loaded machine)
# A runner that takes over a killed or paused holder judges its silence by its own TTL (DESIGN.md, lease
# protocol 3: the observer's clock): 3 s, as the lease proofs' (tests/leases/test_crash_zombie.py), saves
# 3 s of waiting per takeover; its own heartbeat (1 s) stays under half of it.
TAKER_TTL = 3


class Driver:
    """One executor subprocess of gated.py; its output goes to a log file."""

    def __init__(self, backend: Backend, sidefx: Path, log: Path, *args: str, runner: str = "inline",
                 ttl: float = TTL, **behaviour: str):
        self.log = log
        env = dict(os.environ, ENDING_SIDEFX=str(sidefx), PYTHONUNBUFFERED="1", COLUMNS="200")
        env.pop("EXECUTOR_STORAGE_OPTIONS", None)
        if backend.options:
            env["EXECUTOR_STORAGE_OPTIONS"] = json.dumps(backend.options)
        env.update({f"ENDING_{k.upper()}": str(v) for k, v in behaviour.items()})
        self.argv = [sys.executable, str(GATED), "--runner", runner, "--prefix", backend.prefix,
                     "--lease-ttl", str(ttl), "--heartbeat-interval", str(HEARTBEAT), *args]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        self.pid = self.proc.pid

    def wait(self, timeout: float = 90) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"executor {self.pid} did not return in {timeout}s:\n{self.output()[-3000:]}")

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def wait_for(predicate, timeout: float, what: str, driver: Driver | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if driver is not None and driver.proc.poll() is not None:
            pytest.fail(f"the executor exited ({driver.proc.returncode}) before {what}:\n{driver.output()[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f":\n{driver.output()[-3000:]}" if driver else ""))


def started(sidefx: Path, name: str) -> bool:
    return any(p.name.startswith(f"start-{name}-") for p in sidefx.iterdir())


def statuses(backend: Backend) -> dict[str, dict]:
    """step name (first, second, long) -> its status.json."""
    fs = backend.fs()
    out = {}
    for path in fs.glob(f"{backend.prefix}/end/*/.executor/status.json"):
        status = json.loads(fs.cat_file(path))
        out[status["step_id"].split("/")[-1].rsplit("-", 1)[0]] = status
    return out


def run_files(backend: Backend) -> list[dict]:
    fs = backend.fs()
    return [json.loads(fs.cat_file(p)) for p in sorted(fs.glob(f"{backend.prefix}/runs/*.json"))]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_clean(backend: Backend, driver: Driver, code: int | None) -> dict[str, dict]:
    """The store after `driver` returned with `code` (None: it was SIGKILLed, no run file code)."""
    found = statuses(backend)
    running = {n: s["owner"]["pid"] for n, s in found.items()
               if s["state"] == "RUNNING" and not pid_alive(s["owner"]["pid"])}
    assert not running, f"leases left RUNNING by dead holders: {running}\n{driver.output()[-3000:]}"
    if code is not None:
        mine = [r for r in run_files(backend) if r["invocation"]["pid"] == driver.pid]
        assert len(mine) == 1 and mine[0].get("exit_code") == code, (mine, driver.output()[-3000:])
    results = verify_path(open_prefix(backend.prefix, backend.options or None))
    bad = {r.path: [p.render() for p in r.problems] for r in results if not r.ok}
    assert not bad, f"committed outputs differ from their manifests: {bad}"
    return found
