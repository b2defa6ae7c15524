"""A Ray run leaves the process's environment as it found it (issue 45: the library never mutates
`os.environ`): Ray's loopback settings are given to ray.init for its call only, and piped step output
loses its colour codes in the printer, not through RAY_COLOR_PREFIX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_a_ray_run_leaves_the_process_environment_unchanged(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in LOOPBACK_ENV and k not in ("RAY_COLOR_PREFIX", "RAY_ADDRESS")}
    env.update(PYTHONPATH=str(REPO), RAY_raylet_start_wait_time_s="180")  # a loaded machine starts nodes slowly
    done = subprocess.run([sys.executable, "-c", DRIVER, str(REPO / "experiments" / "hello.py"), str(tmp_path / "p")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["code"] == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting Ray" in done.stdout
    # ray.init points PYTHONBREAKPOINT at its own debugger itself (ray/_private/worker.py); nothing else changes
    assert {k: v for k, v in result["changed"].items() if k not in RAY_SETS_ITSELF} == {}, result["changed"]
    assert "\x1b[" not in done.stdout  # piped: forwarded step output without colour codes
