"""scripts/bench/bench_plan_marin.py times the DAG issue 14 describes, and every mode does what it says."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "bench"))

import bench_plan_marin  # noqa: E402


def test_the_dag_is_seeded_deep_and_thirty_fields_wide():
    steps = bench_plan_marin.marin_dag(300)
    again = bench_plan_marin.marin_dag(300)
    index = {id(step): i for listed in (steps, again) for i, step in enumerate(listed)}
    for i, (step, same) in enumerate(zip(steps, again)):
        parents = [index[id(p.step)] for p in step.config.inputs]
        assert parents == [index[id(p.step)] for p in same.config.inputs]  # seeded
        assert (1 <= len(parents) <= 3) if i else parents == []
        assert all(p < i for p in parents) and parents == sorted(set(parents))
    assert max(len(s.config.inputs) for s in steps) == 3
    fields = dataclasses.fields(bench_plan_marin.StepConfig)
    assert len(fields) == bench_plan_marin.N_FIELDS == 30
    assert not any(f.metadata for f in fields)  # every field hashed
    assert len({id(s.config.optimizer) for s in steps}) == 1  # one shared nested dataclass


def test_every_mode_runs_as_a_whole_process_and_prints_its_row():
    proc = subprocess.run([sys.executable, "scripts/bench/bench_plan_marin.py", "--steps", "40", "--repeats", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for mode in ("python -c pass", *bench_plan_marin.MODES):
        assert re.search(rf"^  {re.escape(mode)}\s+\d+\.\d\d / +\d+\.\d\d s \(\d+\.\d\d\)", proc.stdout, re.M), proc.stdout
