"""GPU readiness: tokens/s and MFU of the MoE train step on one accelerator.

    python scripts/bench/bench_gpu_mfu.py                       # medium MoE, on the default device
    python scripts/bench/bench_gpu_mfu.py --preset tiny --steps 2   # a CPU smoke run (tests)
    python scripts/bench/bench_gpu_mfu.py --remat dots_saveable --batch-size 32 --json out.json
    python scripts/bench/bench_gpu_mfu.py --dtype bfloat16 --attention cudnn    # bf16 compute, fused attention
    python scripts/bench/bench_gpu_mfu.py --memory-only          # compiled peak memory per dtype x remat, no run

Runs the jitted train step (model, optimizer, router-bias update) directly, without the executor,
Ray or draccus, so it runs on the GPU image (Python 3.12, jax 0.11, no Ray) as well as under
uv.lock's jax 0.10. Run from the repository root (it puts the root on sys.path).

FLOPs per token = `ModelConfig.flops_per_token()` = 6 x active params per token (attention,
dense/shared/top-k routed expert matmuls, router and unembedding; embedding lookup excluded)
+ 6 x n_layers x seq_len x d_model (causal attention scores and values, forward + backward).
MFU = FLOPs per token x tokens/s / peak FLOP/s of the device (dense bf16 tensor-core peak from
the table below, or --peak-tflops), in either compute dtype: with float32 compute a GPU runs the
matmuls as TF32 at best, so the bf16 peak is the honest denominator for both.

Memory: every report holds XLA's compiled memory analysis of the step (arguments, outputs, temporaries;
peak = arguments + outputs not aliased to donated arguments + temporaries) for the device it compiled for; `--memory-only` compiles the step for each compute dtype and
remat policy from abstract shapes (no state is allocated, nothing runs), so the peak of a preset can
be read on a CPU before a GPU is rented (a CPU compile schedules differently: treat it as an estimate).
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
from steps.train.model import COMPUTE_DTYPES, attention_implementation  # noqa: E402
from steps.train.optim import make_optimizer  # noqa: E402
from steps.train.state import init_state, make_train_step  # noqa: E402

# (model, default batch per compute dtype). Medium in float32 runs attention through XLA, which holds
# [batch, heads, seq, seq] scores per layer (~1.5 GiB per sequence per layer in the CPU compile: see
# README "Compiled memory"), so its default batch is 4; bfloat16 takes cuDNN's fused kernel on a GPU.
PRESETS = {
    "medium": (ModelConfig(vocab_size=32768, seq_len=2048, d_model=1024, n_heads=16, n_layers=8, n_dense=1, d_ff=4096,
                           n_experts=16, top_k=2, d_expert=1024, n_shared=1), {"float32": 4, "bfloat16": 16}),
    "tiny": (ModelConfig(vocab_size=512, seq_len=64, d_model=64, n_heads=4, n_layers=2, n_dense=1, d_ff=128,
                         n_experts=4, top_k=2, d_expert=32, n_shared=1), {"float32": 4, "bfloat16": 4}),
}
FLOP_FORMULA = "6 x active params per token + 6 x n_layers x seq_len x d_model"
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "B200": 2250.0}  # dense bf16


def device_peak_tflops(device) -> float | None:
    kind = getattr(device, "device_kind", "") or ""
    for name, peak in PEAK_TFLOPS.items():
        if name in kind.upper():
            return peak
    return None


def memory_of(compiled) -> dict:
    """XLA's compiled memory analysis of one program, in MiB (None where the backend gives none)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    mib = lambda name: getattr(stats, name, 0) / 2**20  # noqa: E731
    return {"argument_mib": mib("argument_size_in_bytes"), "output_mib": mib("output_size_in_bytes"),
            "alias_mib": mib("alias_size_in_bytes"), "temp_mib": mib("temp_size_in_bytes"),
            "xla_peak_mib": mib("peak_memory_in_bytes"),  # as reported (CPU's leaves temporaries out)
            # the bound used to pick batch sizes: every argument, every output that does not reuse a
            # (donated) argument's buffer, and all temporaries live at once
            "peak_mib": (mib("argument_size_in_bytes") + mib("output_size_in_bytes") - mib("alias_size_in_bytes")
                         + mib("temp_size_in_bytes"))}


def _jitted_step(cfg: ModelConfig, dtype: str):
    """A fresh optimizer and the jitted train step (state donated), as the trainer builds them."""
    optimizer = make_optimizer(OptimizerConfig(), 1000)
    return optimizer, jax.jit(make_train_step(cfg, optimizer, compute_dtype=dtype), donate_argnums=(0,))


def memory_table(cfg: ModelConfig, batch_size: int, dtypes=("float32", "bfloat16"),
                 remats=("none", "dots_saveable", "full")) -> list[dict]:
    """Compiled memory of the train step per compute dtype and remat policy, from abstract shapes."""
    rows = []
    for dtype in dtypes:
        for remat in remats:
            model = dataclasses.replace(cfg, remat=remat)
            optimizer, step = _jitted_step(model, dtype)
            state = jax.eval_shape(lambda: init_state(model, optimizer, 0))  # noqa: B023
            batch = jax.ShapeDtypeStruct((batch_size, model.seq_len + 1), np.int32)
            rows.append({"dtype": dtype, "remat": remat, **memory_of(step.lower(state, batch).compile())})
    return rows


def device_memory_limit(device) -> int | None:
    """Bytes the allocator may use on `device` (GPUs report it; CPUs do not)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return (stats or {}).get("bytes_limit")


def fit_batch(cfg: ModelConfig, dtype: str, batch_size: int, limit_bytes: int | None, headroom: float = 0.9):
    """Compile the step from abstract shapes, halving the batch until its compiled peak fits in
    `headroom` x `limit_bytes` (no limit: the first compile is kept). -> (batch, optimizer, compiled,
    [{batch_size, memory...} per compile])."""
    tried = []
    while True:
        optimizer, step = _jitted_step(cfg, dtype)
        state = jax.eval_shape(lambda: init_state(cfg, optimizer, 0))  # noqa: B023
        compiled = step.lower(state, jax.ShapeDtypeStruct((batch_size, cfg.seq_len + 1), np.int32)).compile()
        tried.append({"batch_size": batch_size, **memory_of(compiled)})
        fits = limit_bytes is None or tried[-1].get("peak_mib", 0) * 2**20 <= headroom * limit_bytes
        if fits or batch_size == 1:
            return batch_size, optimizer, compiled, tried
        batch_size //= 2


def run_bench(cfg: ModelConfig, batch_size: int, steps: int, dtype: str, peak_tflops: float | None) -> dict:
    """Compile (halving the batch until it fits the device's memory), warm up (2 steps), time
    `steps` steps; tokens/s, MFU and the compiled memory of each batch size tried."""
    device = jax.devices()[0]
    limit = device_memory_limit(device)
    t = time.perf_counter()
    batch_size, optimizer, compiled, tried = fit_batch(cfg, dtype, batch_size, limit)
    compile_s = time.perf_counter() - t
    state = init_state(cfg, optimizer, 0)
    rng = np.random.default_rng(0)
    batches = [jax.device_put(rng.integers(0, cfg.vocab_size, (batch_size, cfg.seq_len + 1)).astype(np.int32))
               for _ in range(2)]
    times = []
    for i in range(2 + steps):
        t = time.perf_counter()
        state, metrics = compiled(state, batches[i % 2])
        jax.block_until_ready(metrics["loss"])
        if i >= 2:
            times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    tokens_per_s = batch_size * cfg.seq_len / step_s
    flops_per_s = cfg.flops_per_token() * tokens_per_s
    peak = peak_tflops or device_peak_tflops(device)
    return {"device": f"{device.platform}:{getattr(device, 'device_kind', '')}", "jax": jax.__version__,
            "dtype": dtype, "attention": attention_implementation(cfg.attention, COMPUTE_DTYPES[dtype]),
            "remat": cfg.remat, "batch_size": batch_size, "seq_len": cfg.seq_len,
            "active_params_per_token": cfg.active_params(), "flops_per_token": cfg.flops_per_token(),
            "flop_formula": FLOP_FORMULA, "compile_s": compile_s, "step_s_median": step_s,
            "tokens_per_s": tokens_per_s, "model_tflops_per_s": flops_per_s / 1e12, "peak_tflops": peak,
            "mfu": flops_per_s / (peak * 1e12) if peak else None, "final_loss": float(metrics["loss"]),
            "device_memory_limit_mib": limit / 2**20 if limit else None, "memory": tried[-1],
            "batch_sizes_tried": tried}


def describe(report: dict, preset: str) -> str:
    mfu = f"{100 * report['mfu']:.1f}%" if report["mfu"] is not None else \
        "n/a (peak unknown for this device; pass --peak-tflops)"
    peak_mem = report["memory"].get("peak_mib")
    halved = f" (halved from {report['batch_sizes_tried'][0]['batch_size']} to fit)" \
        if len(report["batch_sizes_tried"]) > 1 else ""
    return (f"{report['device']} jax {report['jax']} preset {preset} {report['dtype']} (attention "
            f"{report['attention']}, remat {report['remat']}), batch {report['batch_size']}{halved} x {report['seq_len']}: "
            f"{report['tokens_per_s']:,.0f} tokens/s, {report['model_tflops_per_s']:.3f} model TFLOP/s, MFU {mfu} "
            f"of {report['peak_tflops']} TFLOP/s; step {report['step_s_median'] * 1000:.1f} ms, compile "
            f"{report['compile_s']:.1f} s, compiled peak memory "
            + (f"{peak_mem / 1024:.2f} GiB" if peak_mem is not None else "n/a"))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="medium")
    parser.add_argument("--batch-size", type=int, help="sequences per step (default: the preset's for the dtype); "
                                                       "halved until the step fits the device's memory")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="compute dtype")
    parser.add_argument("--attention", choices=("auto", "xla", "cudnn"), default="auto")
    parser.add_argument("--remat", choices=("none", "full", "dots_saveable"), default="none")
    parser.add_argument("--peak-tflops", type=float, help="device peak, when the table does not know it")
    parser.add_argument("--memory-only", action="store_true",
                        help="print the compiled memory per dtype and remat policy; run nothing")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    base, default_batch = PRESETS[args.preset]
    cfg = dataclasses.replace(base, remat=args.remat, attention=args.attention)
    batch_size = args.batch_size or default_batch[args.dtype]
    if args.memory_only:
        rows = memory_table(cfg, batch_size)
        report = {"device": str(jax.devices()[0].platform), "jax": jax.__version__, "preset": args.preset,
                  "batch_size": batch_size, "seq_len": cfg.seq_len, "memory": rows}
        for row in rows:
            print(f"{args.preset} batch {batch_size} x {cfg.seq_len} {row['dtype']:>8} remat {row['remat']:<13} "
                  f"peak {row['peak_mib'] / 1024:7.2f} GiB (arguments {row['argument_mib'] / 1024:.2f}, "
                  f"temporaries {row['temp_mib'] / 1024:.2f})", flush=True)
    else:
        report = {"preset": args.preset, **run_bench(cfg, batch_size, args.steps, args.dtype, args.peak_tflops)}
        print(describe(report, args.preset), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
