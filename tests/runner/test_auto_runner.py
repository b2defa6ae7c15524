"""The default runner, `auto` (issue 47): steps that need nothing of Ray run inline, in child
processes, and Ray starts only for a step that needs it (runner/auto.py).

hello.py's five steps never start Ray; a step whose Resources ask a scheduler for something, or
that fans work out with map_shards, still runs on Ray (an embedded cluster started for it); a
cluster address puts every step on Ray; `--runner ray` forces Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import executor
from executor import ExecutorStep, Resources, output_path_of, this_output_path
from executor.core.errors import ExecutorError
from executor.engine.runner.auto import needs_ray
from tests.runner.autofns import Where, fan, where

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "experiments" / "hello.py"


def returned(result, step) -> dict:
    """What the step returned, from its record."""
    record = Path(result.step(step).output_path) / ".executor" / "record.json"
    return json.loads(record.read_text())["result"]


def hello(prefix: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-X", "importtime", str(HELLO), "--prefix", str(prefix), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_hello_by_default_runs_every_step_without_starting_or_importing_ray(tmp_path):
    done = hello(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5/5 step(s) succeeded" in done.stdout
    assert "starting Ray" not in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "ray" not in imported, "the default runner imported Ray for steps that need none of it"


def test_needs_ray_names_what_only_a_scheduler_gives():
    assert needs_ray(Resources()) is None
    assert needs_ray(Resources(env={"A": "1"}, timeout_s=5, max_infra_retries=1)) is None
    assert needs_ray(Resources(gpus=1)) == "gpus=1"
    assert needs_ray(Resources(hosts=2, cpus=4)) == "hosts=2, cpus=4"
    assert needs_ray(Resources(custom={"tpu": 1})) == "custom={'tpu': 1}"
    assert needs_ray(Resources(memory_bytes=1 << 30)) == f"memory_bytes={1 << 30}"


def test_a_memory_prefix_refuses_a_step_that_needs_ray_naming_it():
    step = ExecutorStep("auto/gpu", where, Where(this_output_path()), resources=Resources(gpus=1))
    with pytest.raises(ExecutorError, match=r"'auto/gpu' asks for Resources\(gpus=1\).*memory://"):
        executor.run([step], prefix="memory://auto-test")


def test_plain_steps_run_inline_and_a_fan_out_moves_its_step_to_ray(tmp_path):
    """plain runs first, inline (a child of this process); fan reaches map_shards inline, is
    stopped there and run again on a Ray cluster started for it, where its shards are Ray tasks."""
    seen: list = []
    plain = ExecutorStep("auto/plain", where, Where(this_output_path()))
    fanned = ExecutorStep("auto/fan", fan, Where(this_output_path(), after=output_path_of(plain)))
    result = executor.run([fanned], prefix=str(tmp_path), subscribers=[seen.append])
    assert result.exit_code == 0, [(s.name, s.error) for s in result.steps]
    first = returned(result, plain)
    assert first["on_ray"] is False and first["ppid"] == os.getpid()
    moved = returned(result, fanned)
    assert moved["starts"] == ["False", "True"], "the step must start inline, then again on Ray"
    assert moved["on_ray"] is True and moved["shards_on_ray"] == [True, True, True]
    infos = [getattr(e, "text", "") for e in seen]
    assert any("starting Ray (auto/fan" in t and "map_shards" in t for t in infos), infos


def test_a_step_asking_for_resources_runs_on_ray(tmp_path):
    step = ExecutorStep("auto/half", where, Where(this_output_path()), resources=Resources(cpus=0.5))
    result = executor.run([step], prefix=str(tmp_path))
    assert result.exit_code == 0, [(s.name, s.error) for s in result.steps]
    assert returned(result, step)["on_ray"] is True


def test_a_cluster_address_puts_every_step_on_ray(tmp_path, ray_head):
    step = ExecutorStep("auto/plain", where, Where(this_output_path()))
    result = executor.run([step], prefix=str(tmp_path), ray_address=ray_head.address,
                          environ={**ray_head.environment(), "EXECUTOR_SHIP_CODE": "0"})
    assert result.exit_code == 0, [(s.name, s.error) for s in result.steps]
    assert returned(result, step)["on_ray"] is True
