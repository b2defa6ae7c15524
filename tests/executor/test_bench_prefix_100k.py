"""scripts/bench/bench_prefix_100k.py (issue 50) runs end to end on a small prefix and prints each figure."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_prefix_bench_plans_a_complete_prefix_and_serves_it():
    proc = subprocess.run([sys.executable, "scripts/bench/bench_prefix_100k.py", "--steps", "30", "--requests", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for mode in ("dry-empty", "dry-done", "run-done"):
        assert re.search(rf"^  {mode}\s+\d+\.\d\d / +\d+\.\d\d s   peak RSS +\d+ MB", proc.stdout, re.M), proc.stdout
    assert re.search(r"^  serve      start \d+\.\d\d s; first byte of GET / \d+ ms .*RSS \d+ MB$", proc.stdout, re.M)
