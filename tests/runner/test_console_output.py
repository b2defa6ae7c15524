"""Piped console output of a Ray run: no ANSI colour codes from forwarded step output, every line a
step printed (stdout and stderr) before that step's ✔ line, and no end-of-output markers shown.

The run is a driver process of its own (its piped output is what is checked) on the directory's
shared `ray start` head (tests/runner/conftest.py), not on an embedded cluster started for it:
forwarding to the driver is the same either way, and a cluster start is the costly part (issue 46)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXPERIMENT = '''\
import sys
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, this_output_path


@dataclass(frozen=True)
class Talk:
    label: str
    output_path: str


def talk(config):
    for i in range(40):
        print(f"{config.label} line {i}", flush=True)
        print(f"{config.label} err {i}", file=sys.stderr, flush=True)
    print(f"{config.label} LAST", flush=True)
    return {"lines": 81}


first = ExecutorStep("talk/first", talk, Talk("first", this_output_path()))
second = ExecutorStep("talk/second", talk, Talk("second", this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[first, second])
'''


def test_piped_output_is_plain_and_each_steps_lines_come_before_its_tick(tmp_path, ray_head):
    path = tmp_path / "talk.py"
    path.write_text(EXPERIMENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "RAY_COLOR_PREFIX"}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), RAY_ADDRESS=ray_head.address)
    result = subprocess.run([sys.executable, str(path), "--prefix", str(tmp_path / "prefix"), "--runner", "ray"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    out = result.stdout
    assert result.returncode == 0, out[-4000:]
    assert f"joining Ray cluster at {ray_head.address}" in out, out[-4000:]
    assert "\x1b[" not in out  # neither Ray's prefixes nor our own lines carry colour codes when piped
    assert "stepgraph-end-of-output" not in out
    lines = out.splitlines()
    for label in ("first", "second"):
        tick = next((i for i, line in enumerate(lines) if line.startswith("✔") and f"talk/{label}" in line), None)
        assert tick is not None, f"no ✔ line for talk/{label} (exit 0):\n{out}"  # the whole output: seen once in CI
        printed = [i for i, line in enumerate(lines) if f"{label} line " in line or f"{label} err " in line
                   or f"{label} LAST" in line]
        assert len(printed) == 81, out[-4000:]  # Ray's deduplication must not fold them either
        assert max(printed) < tick, f"a line of {label} came after its ✔ line:\n{out[-4000:]}"
