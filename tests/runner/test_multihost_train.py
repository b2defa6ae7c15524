"""The MoE train step on two simulated hosts: `Resources(hosts=2)` runs it as two Ray worker
processes, one on each node of a real two-node cluster (tests/runner/conftest.py `two_nodes`,
placed as users' runs are), with 4 fake CPU devices each, joined by jax.distributed into one 2 (data, across the
hosts) x 4 (expert, inside a host) mesh: experts split over the expert axis with all-to-all
dispatch, parameters and optimizer state sharded FSDP-style over the devices.

- Each host reads only its own rows of every batch and writes only its own checkpoint shards.
- The loss trajectory equals a single-process 8-device run's (rel 1e-5; the two differ only in
  where XLA's cross-device reductions run).
- SIGKILL of one host process mid-run is an infrastructure failure: the step is retried, resumes
  from the newest committed checkpoint and ends with parameters bitwise equal to a run that was
  never interrupted.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from executor import ExecutorStep, this_output_path
from executor.core.step import Resources
from tests.runner.test_ray_cluster import execute, record_of, step_dir
from tests.steps.test_train import cache, compile_cache, run_python, tiny_config, tiny_model  # noqa: F401  (fixtures)

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = [pytest.mark.slow, pytest.mark.jax]

DEVICES_PER_HOST = 4
XLA_FLAGS = (f"--xla_force_host_platform_device_count={DEVICES_PER_HOST} --xla_backend_optimization_level=0"
             " --xla_llvm_disable_expensive_passes=true")


def config(cache: str, output_path, **overrides):
    """test_train's tiny run, on 8 devices: FSDP, all-to-all experts, one expert group per host."""
    run = tiny_config(cache, "", **{**dict(
        model=dataclasses.replace(tiny_model(), n_experts=8), num_devices=8, fsdp=True, expert_parallel=True,
        expert_dispatch="all_to_all", expert_axis_size=DEVICES_PER_HOST), **overrides})
    return dataclasses.replace(run, output_path=output_path)   # tiny_config makes it a str; keep placeholders


def two_host_step(name: str, cache: str, compile_cache: dict, retries: int, **kill) -> ExecutorStep:
    from tests.runner import trainfns

    return ExecutorStep(name, trainfns.host_train, trainfns.HostTrain(config(cache, this_output_path()), **kill),
                        resources=Resources(cpus=2, hosts=2, max_infra_retries=retries,  # a whole node per host
                                            env={"XLA_FLAGS": XLA_FLAGS, **compile_cache}))


def model_leaves(out: Path) -> list[np.ndarray]:
    """The exported model as the eval step loads it (the sharded layout read back on one host)."""
    from steps.eval.lm import load_trained_model

    import jax

    trained = load_trained_model(str(out))
    return [np.asarray(x) for x in jax.tree.leaves({"params": trained.params, "router_bias": trained.router_bias})]


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_two_hosts_train_like_one_and_recover_from_a_killed_host(two_nodes, tmp_path, cache,  # noqa: F811
                                                                     compile_cache):  # noqa: F811
    straight = two_host_step("straight", cache, compile_cache, retries=0)
    killed = two_host_step("killed", cache, compile_cache, retries=1, kill_host=1, kill_after=8)
    assert execute([straight, killed], tmp_path) == 0

    # one process, eight devices: the same run without jax.distributed
    single = tmp_path / "single"
    code = f"""
        from steps.train import train
        from tests.runner.test_multihost_train import config
        train(config({cache!r}, {str(single)!r}))
        """
    proc = run_python(code, {"XLA_FLAGS": XLA_FLAGS.replace(f"count={DEVICES_PER_HOST}", "count=8"), **compile_cache})
    assert proc.returncode == 0, proc.stderr[-4000:]

    out = step_dir(tmp_path, "straight")
    assert len(losses(out)) == 12
    np.testing.assert_allclose(losses(out), losses(single), rtol=1e-5)

    # each host read only its own half of every batch (4 devices x 1 row), and wrote its own shards
    reads = {h: json.loads((out / f"rows-host{h}.json").read_text()) for h in (0, 1)}
    assert reads[0]["pid"] != reads[1]["pid"]
    # process 0 alone writes the run's files: model.json, the data description, metrics.jsonl
    assert {"model.json", "metrics.jsonl"} <= set(reads[0]["run_files_written"]) and reads[1]["run_files_written"] == []
    for h, expected_rows in ((0, set(range(0, 4))), (1, set(range(4, 8)))):
        by_step: dict[int, set[int]] = {}
        for step, lo, hi in reads[h]["rows"]:
            by_step.setdefault(step, set()).update(range(lo, hi))
        assert sorted(by_step) == list(range(12)) and all(rows == expected_rows for rows in by_step.values())
    shards = out / "checkpoints" / f"step-{12:06d}" / "shards"
    assert sorted(p.name for p in shards.iterdir()) == [
        "process-00000.json", "process-00000.npz", "process-00001.json", "process-00001.npz"]

    # the killed host: an infrastructure failure, retried, resumed, bitwise equal at the end
    record = record_of(tmp_path, "killed")
    assert [a["cause"] for a in record["extra"]["attempts"]] == ["infrastructure", "ok"], record["extra"]["attempts"]
    assert record["result"]["resumed_from_step"] in (4, 8), record["result"]
    killed_out = step_dir(tmp_path, "killed")
    assert (killed_out / "killed-once").exists()
    assert losses(killed_out) == losses(out)
    for a, b in zip(model_leaves(killed_out), model_leaves(out), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
