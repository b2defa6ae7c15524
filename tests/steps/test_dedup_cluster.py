"""Dedup on a real three-node Ray cluster on this machine (one cluster for the module, in its own
process: tests/steps/cluster_driver.py): same kept sets as one process, a node lost mid-step, and
shard tasks whose workers always die failing the step with a clear message instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("cluster_driver.py")
FUZZY_STAGES = ["minhash", "lsh", "candidate-shingles", "verify", "components", "root-pairs", "check-shingles", "check",
                "write"]
# One three-node cluster serves the module: ~2 min on a quiet 2-core machine, more under load.
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "PYTHONPATH": str(DRIVER.parents[2])}
    # The timeout is the "never hangs" bound for every scenario, the always-dying tasks included.
    done = subprocess.run([sys.executable, str(DRIVER), str(work)], capture_output=True, text=True,
                          timeout=800, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_three_nodes_give_the_kept_sets_of_one_process(findings):
    assert findings["nodes"] == 3
    assert findings["cluster_exact"] == findings["reference_exact"]
    assert findings["cluster_fuzzy"] == findings["reference_fuzzy"]
    assert findings["cluster_fuzzy_partitions"] > 1
    nodes = findings["cluster_fuzzy_nodes_per_stage"]  # stages of one or two tasks may stay on one node
    assert list(nodes) == FUZZY_STAGES and max(nodes.values()) >= 2 and max(nodes.values()) <= 3


def test_a_node_lost_mid_step_gives_the_identical_result(findings):
    assert findings["removed_mid_step"], "the node was removed after the step ended: nothing was tested"
    assert findings["node_lost_error"] is None
    assert findings["node_lost_fuzzy"] == findings["reference_fuzzy"]


def test_shard_tasks_that_always_die_fail_the_step_with_a_clear_message(findings):
    message = findings["dying_error"]
    assert message is not None, "map_shards returned although every attempt died"
    assert message.startswith("ShardTaskDied: kill_own_worker: shard ")
    assert "died on all 4 attempts" in message and "likely cause" in message
