"""The canary command: a small MoE trained end to end on the Shakespeare sample beats the unigram
baseline by the stated margin (exit 0), and an undertrained one is reported as a failure (exit 1)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.steps.test_train import REPO


def canary(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "steps.train.canary", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # trains for real (~20 s); test_eval.py proves a tiny model beats the unigram more cheaply
def test_canary_passes_at_its_defaults():
    proc = canary()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    m = re.search(r"canary PASS: model ([\d.]+) bits/byte, unigram ([\d.]+), gap ([\d.]+) \(>= margin 0.5\)", proc.stdout)
    assert m, proc.stdout
    model, unigram = float(m.group(1)), float(m.group(2))
    assert unigram - model >= 0.5


def test_canary_fails_an_undertrained_model_and_rejects_bad_usage():
    proc = canary("--steps", "2", "--docs", "60")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "canary FAIL" in proc.stdout
    bad = canary("--docs", "3")
    assert bad.returncode == 2 and "--docs=3 must be >= 40" in bad.stderr
