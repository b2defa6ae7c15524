"""One `--runner ray` run of experiments/hello.py in a driver process of its own, on the embedded
cluster the Ray runner starts, holding two promises (one cluster start for both: issue 46):

- the run leaves the process's environment as it found it (issue 45: the library never mutates
  `os.environ`): Ray's loopback settings are given to ray.init for its call only, and piped step output
  loses its colour codes in the printer, not through RAY_COLOR_PREFIX;
- the Ray runner starts its OWN embedded cluster, even when this machine has another one. A bare
  `ray.init()` joins whatever cluster `ray start` (or `ray.cluster_utils.Cluster`) last recorded in
  `<ray temp dir>/ray_current_cluster`; a user's experiment must not land on such a cluster by
  accident: only `--ray-address` / RAY_ADDRESS join one. The driver runs with such a record in its
  Ray temp dir (RAY_TMPDIR), naming an address where nothing listens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from executor.core.record import State, parse_status
from executor.engine.runner.ray_env import LOOPBACK_ENV

REPO = Path(__file__).resolve().parents[2]
RAY_SETS_ITSELF = {"PYTHONBREAKPOINT"}

# A driver that runs experiments/hello.py on an embedded Ray cluster in its own process and prints
# what changed in os.environ. The snapshot is taken after `import ray`: importing Ray sets
# RAY_CLIENT_MODE=0 itself (ray/_private/client_mode_hook.py).
DRIVER = """
import json, os, runpy, sys
import ray
before = dict(os.environ)
sys.argv = [sys.argv[1], "--prefix", sys.argv[2], "--runner", "ray"]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code
changed = {k: [before.get(k), os.environ.get(k)] for k in set(before) | set(os.environ)
           if before.get(k) != os.environ.get(k)}
print("RESULT " + json.dumps({"code": code, "changed": changed}))
"""


@pytest.fixture(scope="module")
def hello_on_ray(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """The driver's run (its output, its RESULT line, its prefix), with a cluster recorded on this machine."""
    prefix = tmp_path_factory.mktemp("hello-on-ray") / "p"
    ray_tmp = Path(tempfile.mkdtemp(prefix="sgiso-", dir="/tmp"))  # short: Ray's unix socket paths
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")  # nothing listens there
        env = {k: v for k, v in os.environ.items()
               if k not in LOOPBACK_ENV and k not in ("RAY_COLOR_PREFIX", "RAY_ADDRESS")}
        env.update(PYTHONPATH=str(REPO), RAY_TMPDIR=str(ray_tmp),
                   RAY_raylet_start_wait_time_s="180")  # a loaded machine starts nodes slowly
        done = subprocess.run([sys.executable, "-c", DRIVER, str(REPO / "experiments" / "hello.py"), str(prefix)],
                              cwd=prefix.parent, env=env, capture_output=True, text=True, timeout=420)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(lines[-1][len("RESULT "):]), prefix


def test_a_ray_run_leaves_the_process_environment_unchanged(hello_on_ray):
    done, result, _ = hello_on_ray
    assert result["code"] == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting Ray" in done.stdout
    # ray.init points PYTHONBREAKPOINT at its own debugger itself (ray/_private/worker.py); nothing else changes
    assert {k: v for k, v in result["changed"].items() if k not in RAY_SETS_ITSELF} == {}, result["changed"]
    assert "\x1b[" not in done.stdout  # piped: forwarded step output without colour codes


def test_a_cluster_recorded_on_this_machine_is_not_joined_without_an_address(hello_on_ray):
    done, result, prefix = hello_on_ray
    assert result["code"] == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting Ray" in done.stdout
    found = [parse_status(p.read_bytes(), str(p)) for p in prefix.glob("hello/*/.executor/status.json")]
    assert len(found) == 5 and {s.state for s in found} == {State.SUCCESS}
