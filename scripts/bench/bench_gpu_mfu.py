"""GPU readiness: tokens/s and MFU of the MoE train step on one accelerator.

    python scripts/bench/bench_gpu_mfu.py                       # medium MoE, on the default device
    python scripts/bench/bench_gpu_mfu.py --preset tiny --steps 2   # a CPU smoke run (tests)
    python scripts/bench/bench_gpu_mfu.py --remat dots_saveable --batch-size 32 --json out.json

Runs the jitted train step (model, optimizer, router-bias update) directly, without the executor,
Ray or draccus, so it runs on the GPU image (Python 3.12, jax 0.11, no Ray) as well as under
uv.lock's jax 0.10. Run from the repository root (it puts the root on sys.path).

FLOPs per token = `ModelConfig.flops_per_token()` = 6 x active params per token (attention,
dense/shared/top-k routed expert matmuls, router and unembedding; embedding lookup excluded)
+ 6 x n_layers x seq_len x d_model (causal attention scores and values, forward + backward).
MFU = FLOPs per token x tokens/s / peak FLOP/s of the device (dense bf16 tensor-core peak from
the table below, or --peak-tflops). Parameters and matmuls are float32 in this trainer, so on a
GPU the matmuls run as TF32 at best; the bf16 peak is the honest denominator.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from steps.train.config import ModelConfig, OptimizerConfig  # noqa: E402
from steps.train.optim import make_optimizer  # noqa: E402
from steps.train.state import init_state, make_train_step  # noqa: E402

PRESETS = {
    "medium": (ModelConfig(vocab_size=32768, seq_len=2048, d_model=1024, n_heads=16, n_layers=8, n_dense=1, d_ff=4096,
                           n_experts=16, top_k=2, d_expert=1024, n_shared=1), 16),
    "tiny": (ModelConfig(vocab_size=512, seq_len=64, d_model=64, n_heads=4, n_layers=2, n_dense=1, d_ff=128,
                         n_experts=4, top_k=2, d_expert=32, n_shared=1), 4),
}
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "B200": 2250.0}  # dense bf16


def device_peak_tflops(device) -> float | None:
    kind = getattr(device, "device_kind", "") or ""
    for name, peak in PEAK_TFLOPS.items():
        if name in kind.upper():
            return peak
    return None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="medium")
    parser.add_argument("--batch-size", type=int, help="sequences per step (default: the preset's)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps)")
    parser.add_argument("--remat", choices=("none", "full", "dots_saveable"), default="none")
    parser.add_argument("--peak-tflops", type=float, help="device peak, when the table does not know it")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    base, default_batch = PRESETS[args.preset]
    cfg = dataclasses.replace(base, remat=args.remat)
    batch_size = args.batch_size or default_batch
    device = jax.devices()[0]
    optimizer = make_optimizer(OptimizerConfig(), 1000)
    state = init_state(cfg, optimizer, 0)
    rng = np.random.default_rng(0)
    batches = [jax.device_put(rng.integers(0, cfg.vocab_size, (batch_size, cfg.seq_len + 1)).astype(np.int32))
               for _ in range(2)]
    step = jax.jit(make_train_step(cfg, optimizer), donate_argnums=(0,))
    t = time.perf_counter()
    compiled = step.lower(state, batches[0]).compile()
    compile_s = time.perf_counter() - t
    times = []
    for i in range(2 + args.steps):
        t = time.perf_counter()
        state, metrics = compiled(state, batches[i % 2])
        jax.block_until_ready(metrics["loss"])
        if i >= 2:
            times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    tokens_per_s = batch_size * cfg.seq_len / step_s
    flops_per_s = cfg.flops_per_token() * tokens_per_s
    peak = args.peak_tflops or device_peak_tflops(device)
    report = {"device": f"{device.platform}:{getattr(device, 'device_kind', '')}", "jax": jax.__version__,
              "preset": args.preset, "remat": args.remat, "batch_size": batch_size, "seq_len": cfg.seq_len,
              "active_params_per_token": cfg.active_params(), "flops_per_token": cfg.flops_per_token(),
              "compile_s": compile_s, "step_s_median": step_s, "tokens_per_s": tokens_per_s,
              "model_tflops_per_s": flops_per_s / 1e12, "peak_tflops": peak,
              "mfu": flops_per_s / (peak * 1e12) if peak else None, "final_loss": float(metrics["loss"])}
    mfu = f"{100 * report['mfu']:.1f}%" if peak else "n/a (peak unknown for this device; pass --peak-tflops)"
    print(f"{report['device']} jax {report['jax']} preset {args.preset} (remat {args.remat}), batch {batch_size} x "
          f"{cfg.seq_len}: {tokens_per_s:,.0f} tokens/s, {report['model_tflops_per_s']:.3f} model TFLOP/s, "
          f"MFU {mfu}; step {step_s * 1000:.1f} ms, compile {compile_s:.1f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
