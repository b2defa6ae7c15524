"""--cache-from on the Ray runner (issue 30): experiments/hello.py through the real command line, a
driver process joining the session's Ray head (tests/conftest.py `ray_head`: a cluster start saved,
issue 46); the copy is a Ray task on a worker, checked, and `verify` is clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from executor.tools.verify import verify_path
from executor.engine.prefix.prefixes import open_prefix
from tests.cache.test_cache_from_cli import hello_a  # noqa: F401  (fixture)
from tests.executor.test_hello_ray import HELLO, REPO


def test_on_the_ray_runner_the_copy_runs_and_verify_is_clean(hello_a, tmp_path, ray_head):
    env = {k: v for k, v in os.environ.items() if k != "EXECUTOR_CACHE_FROM" and not k.startswith("PYTEST")}
    env["RAY_ADDRESS"] = ray_head.address
    b = tmp_path / "b"
    done = subprocess.run([sys.executable, str(HELLO), "--prefix", str(b), "--cache-from", str(hello_a), "--runner", "ray"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"joining Ray cluster at {ray_head.address}" in done.stdout and "copied" in done.stdout, done.stdout
    [record] = b.glob("hello/summary-*/.executor/record.json")
    assert json.loads(record.read_text())["extra"]["copied_from"]["prefix"] == str(hello_a)
    assert [p.name for p in b.glob("hello/*")] == [record.parent.parent.name]  # nothing upstream made
    checked = verify_path(open_prefix(str(b)))
    assert len(checked) == 1 and checked[0].ok
