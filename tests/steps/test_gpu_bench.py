"""The GPU readiness command runs on CPU without Ray or draccus importable (as on the GPU image)
and reports tokens/s and MFU by its stated formula."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

from steps.train.config import ModelConfig
from tests.steps.test_train import REPO

BLOCK_AND_RUN = textwrap.dedent("""
    import runpy, sys
    class Block:   # the GPU image has neither package: importing one must not be needed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("ray", "draccus"):
                raise ImportError(f"{name} is not installed on the GPU image")
    sys.meta_path.insert(0, Block())
    sys.argv = ["bench_gpu_mfu.py"] + sys.argv[1:]
    runpy.run_path("scripts/bench/bench_gpu_mfu.py", run_name="__main__")
    assert "ray" not in sys.modules and "draccus" not in sys.modules
""")


def test_gpu_command_runs_on_cpu_without_ray_or_draccus(tmp_path):
    out = tmp_path / "mfu.json"
    env = {**os.environ, "XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"}
    proc = subprocess.run([sys.executable, "-c", BLOCK_AND_RUN, "--preset", "tiny", "--steps", "2",
                           "--peak-tflops", "0.5", "--json", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tokens/s" in proc.stdout and "MFU" in proc.stdout
    report = json.loads(out.read_text())
    cfg = ModelConfig(vocab_size=512, seq_len=64, d_model=64, n_heads=4, n_layers=2, n_dense=1, d_ff=128,
                      n_experts=4, top_k=2, d_expert=32, n_shared=1)
    assert report["flops_per_token"] == cfg.flops_per_token()
    assert report["tokens_per_s"] == report["batch_size"] * 64 / report["step_s_median"]
    assert math.isclose(report["mfu"], report["flops_per_token"] * report["tokens_per_s"] / 0.5e12)
    assert math.isfinite(report["final_loss"])
