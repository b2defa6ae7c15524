"""A multi-host step on a real two-node Ray cluster, with the placement users get (STRICT_SPREAD).

The cluster (tests/runner/conftest.py `two_nodes`) is two raylets on this machine: Ray places
them as two machines, so each host of a `Resources(hosts=2)` step lands on its own node, and the
two processes join one jax.distributed group.
"""

from __future__ import annotations

import json

import ray

from executor import ExecutorStep, Resources, this_output_path
from executor.engine.runner.cluster import MULTIHOST_PLACEMENT
from tests.runner import stepfns
from tests.runner.test_ray_cluster import execute, record_of, step_dir


def test_a_two_host_step_runs_one_host_per_node_and_all_reduces(two_nodes, tmp_path):
    assert MULTIHOST_PLACEMENT == "STRICT_SPREAD"  # what the runner asks Ray for, here as on a real cluster
    step = ExecutorStep("allreduce", stepfns.all_reduce, stepfns.AllReduce(this_output_path()),
                        resources=Resources(cpus=1, hosts=2, max_infra_retries=0))
    assert execute([step], tmp_path) == 0
    result = record_of(tmp_path, "allreduce")["result"]
    assert result["process_id"] == 0 and result["num_processes"] == 2
    assert result["allgather"] == [1.0, 2.0]
    assert result["sum"] == 3.0  # 1 + 2 summed across the two processes by an XLA collective
    out = step_dir(tmp_path, "allreduce")
    hosts = [json.loads((out / f"host-{i}.json").read_text()) for i in (0, 1)]
    assert len({h["pid"] for h in hosts}) == 2, "the step ran in two processes"
    nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert {h["node"] for h in hosts} == nodes and len(nodes) == 2, "one host on each node"


def test_three_hosts_on_two_nodes_are_refused_at_plan_time(two_nodes, tmp_path, capsys):
    step = ExecutorStep("wide", stepfns.all_reduce, stepfns.AllReduce(this_output_path(), hosts=3),
                        resources=Resources(cpus=1, hosts=3))
    assert execute([step], tmp_path) == 2
    err = capsys.readouterr().err
    assert "'wide' asks for 3 hosts" in err and "only 2 node(s)" in err, err
    assert not list(tmp_path.glob("*/.executor/status.json")), "nothing may run or be leased"
