"""The GPU readiness command (scripts/gpu_check.sh --smoke) runs on CPU with neither Ray nor draccus
importable in any of its processes (as on the GPU image), and writes every figure to one JSON file:
devices, MFU in both compute dtypes by its stated formula, compiled memory, step time with and
without a save in flight, and tiny_moe's training."""

from __future__ import annotations

import json
import math
import os
import subprocess
import textwrap
import time

import pytest

from tests.steps.test_train import REPO

# JAX is imported inside the tests (steps.train imports it), never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax

NO_RAY_OR_DRACCUS = textwrap.dedent("""
    import sys
    class Block:   # the GPU image has neither package: importing one must not be needed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("ray", "draccus"):
                raise ImportError(f"{name} is not installed on the GPU image")
    sys.meta_path.insert(0, Block())
""")


def tiny():
    """The model `gpu_check.sh --smoke` measures (scripts/gpu_check.py)."""
    from steps.train.config import ModelConfig

    return ModelConfig(vocab_size=512, seq_len=64, d_model=64, n_heads=4, n_layers=2, n_dense=1, d_ff=128,
                       n_experts=4, top_k=2, d_expert=32, n_shared=1)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """One `gpu_check.sh --smoke` run, shared by this module's tests (~30 s of CPU)."""
    tmp = tmp_path_factory.mktemp("gpu_check")
    hook = tmp / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_RAY_OR_DRACCUS)   # in every process of the command
    out = tmp / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true",
           # save_overlap compiles mfu_float32's step again: read from the cache, not compiled twice
           "JAX_COMPILATION_CACHE_DIR": str(tmp / "jax-cache"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--smoke", "--json", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc, json.loads(out.read_text())


def test_gpu_check_smoke_runs_every_part_on_cpu_without_ray_or_draccus(smoke):
    proc, report = smoke
    for part in ("tiny_moe", "devices", "mfu_float32", "mfu_bfloat16", "save_overlap"):
        assert report[part]["ok"], report[part]
        assert f"[gpu_check] {part}: " in proc.stdout
    assert report["devices"]["backend"] == "cpu" and report["devices"]["devices"]

    for dtype in ("float32", "bfloat16"):
        mfu = report[f"mfu_{dtype}"]
        assert mfu["dtype"] == dtype and mfu["attention"] == "xla" and mfu["peak_tflops"] == 0.5
        assert mfu["flops_per_token"] == tiny().flops_per_token()
        assert mfu["flop_formula"] == "6 x active params per token + 6 x n_layers x seq_len x d_model"
        assert mfu["tokens_per_s"] == mfu["batch_size"] * 64 / mfu["step_s_median"]
        assert math.isclose(mfu["mfu"], mfu["flops_per_token"] * mfu["tokens_per_s"] / 0.5e12)
        memory = mfu["memory"]
        assert memory["peak_mib"] == memory["argument_mib"] + memory["output_mib"] - memory["alias_mib"] + memory["temp_mib"]
        assert memory["argument_mib"] > 0 and memory["temp_mib"] > 0
        assert math.isfinite(mfu["final_loss"])

    overlap = report["save_overlap"]
    assert overlap["steps_during_save"] >= 1 and overlap["state_mb"] > 0
    assert overlap["step_s_median_without_save"] > 0 and overlap["background_save_pause_s"] >= 0
    trained = report["tiny_moe"]
    assert trained["steps"] == 2 and math.isfinite(trained["final_loss"]) and trained["tokens_per_s_median"] > 0
    assert "train/tiny_moe-" in trained["output_path"]


def test_a_refused_cudnn_attention_is_measured_with_xla_and_its_error_kept(smoke):
    """On a GPU, bf16 takes cuDNN's kernel; if it refuses, the one GPU call still gets an MFU figure.
    --smoke asks for cuDNN by name, and a CPU has none: refused."""
    proc, report = smoke
    bf16, f32 = report["mfu_bfloat16"], report["mfu_float32"]
    assert bf16["attention"] == "xla" and bf16["cudnn_error"] and "cudnn_error" not in f32
    assert bf16["tokens_per_s"] > 0 and "attention xla" in bf16["line"]
    assert f"[gpu_check] mfu_bfloat16: {bf16['line']}" in proc.stdout


def test_each_part_is_written_as_it_ends_and_a_failure_is_recorded(tmp_path, monkeypatch):
    """A GPU call cut short by its time limit keeps the parts it finished; a failed part is an
    error in the JSON, not the end of the run."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    monkeypatch.syspath_prepend(str(REPO / "scripts" / "bench"))
    import gpu_check

    path, results = tmp_path / "gpu_check.json", {"started_unix": time.time()}
    gpu_check.run_part("first", lambda: {"figure": 1.5}, results, str(path))
    assert json.loads(path.read_text())["first"] == {"ok": True, "figure": 1.5, "part_s": results["first"]["part_s"]}
    gpu_check.run_part("second", lambda: 1 / 0, results, str(path))
    written = json.loads(path.read_text())
    assert written["first"]["figure"] == 1.5
    assert written["second"]["ok"] is False and written["second"]["error"].startswith("ZeroDivisionError")
