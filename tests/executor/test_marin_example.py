"""experiments/marin_hello_world.py (Marin's tutorial, rewritten) runs as a script and matches its ids file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import executor

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "experiments" / "marin_hello_world.py"


def script(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "EXECUTOR_PREFIX")}
    return subprocess.run([sys.executable, str(EXAMPLE), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_marin_hello_world_runs_with_its_artifact_and_committed_ids(tmp_path):
    assert script("--check").returncode == 0  # ids equal the committed marin_hello_world.plan.json
    done = script("--prefix", str(tmp_path), "--runner", "inline")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((REPO / "experiments" / "marin_hello_world.plan.json").read_text())
    ids = {s["name"]: s["step_id"] for s in plan["steps"]}
    stats_dir = tmp_path / ids["hello_world/stats"]
    assert json.loads((stats_dir / "stats.json").read_text()) == {"sum": 4950, "min": 0, "max": 99}
    record = json.loads((stats_dir / ".executor" / "record.json").read_text())
    assert record["result"] == {"sum": 4950, "min": 0, "max": 99}
    assert record["result_type"] == "experiments.marin_hello_world:Stats"
    # imported (as from a notebook) the steps have the same ids, so the artifact loads back
    from experiments import marin_hello_world

    loaded = executor.load_result(marin_hello_world.stats, prefix=str(tmp_path))
    assert loaded == marin_hello_world.Stats(sum=4950, min=0, max=99)
    assert json.loads((tmp_path / ids["hello_world/data"] / "numbers.json").read_text()) == list(range(100))
    again = script("--prefix", str(tmp_path), "--dry_run", "true")  # Marin's flag spelling
    assert again.returncode == 0 and again.stdout.count("succeeded") == 2, again.stdout
