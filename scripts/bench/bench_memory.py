"""Benchmark: the two memory levers of the trainer, measured in one run.

    uv run python scripts/bench/bench_memory.py                 # both parts
    uv run python scripts/bench/bench_memory.py --part loss     # cross-entropy only (compile only)
    uv run python scripts/bench/bench_memory.py --json out.json

1. Loss: peak temporary memory of value_and_grad of the next-token loss at vocab 128k x 4,096
   tokens (d_model 1024, float32), naive (full logits + log_softmax) vs blockwise (8,192 vocab
   columns per block). Figures come from XLA's compiled memory analysis (nothing is executed),
   so they are exact for the compiled program and need no accelerator.
2. Remat: for a small MoE train step, temporary memory (compiled) and median step time
   (executed) for remat none / full / dots_saveable. Step time is reported as a ratio to
   `none` measured in the same run.

XLA:CPU's default scheduler orders work for concurrency, not memory, and then keeps every
layer's activations alive whatever the remat policy (measured: identical temp sizes); this
script therefore selects its memory-minimising scheduler, as GPU/TPU backends do by default.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()

import jax  # noqa: E402
import jax.numpy as jnp

from steps.train.config import ModelConfig, OptimizerConfig
from steps.train.cross_entropy import blockwise_nll, naive_nll
from steps.train.optim import make_optimizer
from steps.train.state import init_state, make_train_step

MiB = 2 ** 20


def loss_memory(tokens: int, vocab: int, d_model: int, block: int) -> dict:
    args = (jax.ShapeDtypeStruct((tokens, d_model), jnp.float32), jax.ShapeDtypeStruct((d_model, vocab), jnp.float32),
            jax.ShapeDtypeStruct((tokens,), jnp.int32))
    out = {"tokens": tokens, "vocab": vocab, "d_model": d_model, "block": block,
           "full_logits_MiB": tokens * vocab * 4 / MiB}
    for name, nll in (("naive", naive_nll), ("blockwise", lambda h, w, t: blockwise_nll(h, w, t, block))):
        loss = lambda h, w, t, nll=nll: jnp.mean(nll(h, w, t))  # noqa: E731
        analysis = jax.jit(jax.value_and_grad(loss, (0, 1))).lower(*args).compile().memory_analysis()
        out[f"{name}_temp_MiB"] = analysis.temp_size_in_bytes / MiB
    out["naive_over_blockwise"] = out["naive_temp_MiB"] / out["blockwise_temp_MiB"]
    return out


REMAT_MODEL = ModelConfig(vocab_size=2048, seq_len=512, d_model=128, n_heads=4, n_layers=8, n_dense=1, d_ff=256,
                          n_experts=4, top_k=2, d_expert=64, n_shared=1)


def remat_table(batch_size: int, steps: int) -> list[dict]:
    rows = []
    batch = jax.random.randint(jax.random.key(1), (batch_size, REMAT_MODEL.seq_len + 1), 0, REMAT_MODEL.vocab_size)
    for policy in ("none", "full", "dots_saveable"):
        cfg = dataclasses.replace(REMAT_MODEL, remat=policy)
        optimizer = make_optimizer(OptimizerConfig(), 1000)
        state = init_state(cfg, optimizer, 0)
        step = jax.jit(make_train_step(cfg, optimizer))
        compiled = step.lower(state, batch).compile()
        temp = compiled.memory_analysis().temp_size_in_bytes / MiB
        state, _ = compiled(state, batch)     # warm-up
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready(metrics["loss"])
            times.append(time.perf_counter() - t)
        rows.append({"remat": policy, "temp_MiB": temp, "median_step_s": statistics.median(times)})
    anchor = rows[0]["median_step_s"]
    for row in rows:
        row["step_time_vs_none"] = row["median_step_s"] / anchor
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("loss", "remat", "all"), default="all")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=131072)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--block", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    report = {"backend": jax.default_backend(), "jax": jax.__version__}
    if args.part in ("loss", "all"):
        r = loss_memory(args.tokens, args.vocab, args.d_model, args.block)
        report["loss"] = r
        print(f"loss at vocab {r['vocab']} x {r['tokens']} tokens (d={r['d_model']}, f32, value+grad): "
              f"naive {r['naive_temp_MiB']:.0f} MiB, blockwise (block {r['block']}) {r['blockwise_temp_MiB']:.0f} MiB "
              f"-> {r['naive_over_blockwise']:.1f}x less (full logits alone: {r['full_logits_MiB']:.0f} MiB)")
    if args.part in ("remat", "all"):
        report["remat"] = remat_table(args.batch_size, args.steps)
        print(f"remat on a {REMAT_MODEL.n_layers}-layer MoE (d={REMAT_MODEL.d_model}, seq {REMAT_MODEL.seq_len}, "
              f"batch {args.batch_size}), train step:")
        for row in report["remat"]:
            print(f"  {row['remat']:<14} temp {row['temp_MiB']:7.1f} MiB   step {row['median_step_s'] * 1000:7.1f} ms "
                  f"({row['step_time_vs_none']:.2f}x none)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
