"""scripts/bench/bench_data_scale.py keeps working: at a tiny size on a two-node cluster, the
cluster's kept sets equal the in-process reference, both nodes' workers do work, and every row
reports the driver's and the largest worker's peak RSS."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_data_scale_benchmark_runs_and_its_cluster_equals_one_process():
    proc = subprocess.run([sys.executable, "scripts/bench/bench_data_scale.py", "--base-docs", "1500", "--sizes", "1",
                           "--nodes", "2", "--steps", "exact,fuzzy"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert out.count("equals the in-process reference: True") == 2, out
    cluster_rows = [line for line in out.splitlines() if "label=1x" in line]
    assert len(cluster_rows) == 2, out
    for row in cluster_rows:
        per_node = [float(v) for v in re.search(r"worker_cpu_s_by_node=\[([^\]]*)\]", row).group(1).split(",")]
        assert len(per_node) == 2 and all(v > 0 for v in per_node), row   # both nodes ran tasks
        assert int(re.search(r"driver_rss_mb=(\d+)", row).group(1)) > 0
        assert int(re.search(r"worker_rss_mb=(\d+)", row).group(1)) > 0
        stages = dict(pair.split(":") for pair in re.search(r"nodes_per_stage=(\S+)", row).group(1).split(","))
        assert stages and all(1 <= int(n) <= 2 for n in stages.values()), row
