"""Benchmark: MoE train-step throughput, grouped experts (sort + ragged_dot) vs every expert
computed densely (the control), in the same run and on the same batches.

    uv run python scripts/bench/bench_moe.py                  # small preset, 10 timed steps
    uv run python scripts/bench/bench_moe.py --steps 20 --json out.json

Reports compile time, median step time, tokens/s and model FLOPs/s (6 x active params per
token + attention: the useful work, the same for both; the dense control does n_experts/top_k
times the routed-expert arithmetic on top of it). Also times one MoE layer's forward alone.

On CPU (jax 0.10) `jax.lax.ragged_dot` is lowered to a one-hot-masked dense dot over all
groups ([E, N, D] x [E, D, F]), so the grouped path does the dense control's arithmetic and the
two run at about the same speed there; the gap this measures shows up on backends with a
native grouped matmul (GPU/TPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from steps.train.config import ModelConfig, OptimizerConfig
from steps.train.model import experts_dense, experts_ragged, init_params, moe_layer
from steps.train.optim import make_optimizer
from steps.train.state import init_state, make_train_step

PRESETS = {
    "small": ModelConfig(vocab_size=4096, seq_len=128, d_model=128, n_heads=4, n_layers=4, n_dense=1, d_ff=384,
                         n_experts=16, top_k=2, d_expert=128, n_shared=1),
    "tiny": ModelConfig(vocab_size=2048, seq_len=64, d_model=64, n_heads=4, n_layers=3, n_dense=1, d_ff=192,
                        n_experts=8, top_k=2, d_expert=48, n_shared=1),
}


def time_calls(fn, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return times


def bench_train(cfg: ModelConfig, batch_size: int, steps: int) -> dict:
    optimizer = make_optimizer(OptimizerConfig(), 1000)
    rng = np.random.default_rng(0)
    batches = [jnp.asarray(rng.integers(0, cfg.vocab_size, (batch_size, cfg.seq_len + 1)), jnp.int32)
               for _ in range(4)]
    step_fn = jax.jit(make_train_step(cfg, optimizer), donate_argnums=(0,))
    state = init_state(cfg, optimizer, 0)
    t = time.perf_counter()
    compiled = step_fn.lower(state, batches[0]).compile()
    compile_s = time.perf_counter() - t
    box = {"state": state, "i": 0}

    def one():
        box["state"], metrics = compiled(box["state"], batches[box["i"] % len(batches)])
        box["i"] += 1
        return metrics["loss"]
    time_calls(one, 2)                                   # warm-up
    times = time_calls(one, steps)
    step_s = statistics.median(times)
    tokens = batch_size * cfg.seq_len
    return {"compile_s": compile_s, "step_s_median": step_s, "step_s_min": min(times),
            "tokens_per_s": tokens / step_s, "model_flops_per_s": cfg.flops_per_token() * tokens / step_s}


def bench_layer(cfg: ModelConfig, n_tokens: int, steps: int) -> dict:
    moe = init_params(cfg, jax.random.key(0))["layers"][cfg.n_dense]["moe"]
    x = jax.random.normal(jax.random.key(1), (n_tokens, cfg.d_model))
    fn = jax.jit(lambda p, x: moe_layer(p, jnp.zeros(cfg.n_experts), x, cfg,
                                        experts_ragged if cfg.expert_impl == "ragged" else experts_dense)[0])
    jax.block_until_ready(fn(moe, x))
    times = time_calls(lambda: fn(moe, x), steps)
    return {"moe_layer_forward_ms": 1000 * statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    base = PRESETS[args.preset]
    report = {"preset": args.preset, "model": dataclasses.asdict(base), "batch_size": args.batch_size,
              "timed_steps": args.steps, "backend": jax.default_backend(), "devices": len(jax.devices()),
              "jax": jax.__version__, "machine": platform.machine(), "results": {}}
    for impl in ("ragged", "dense"):
        cfg = dataclasses.replace(base, expert_impl=impl)
        result = bench_train(cfg, args.batch_size, args.steps)
        result.update(bench_layer(cfg, args.batch_size * cfg.seq_len, args.steps))
        report["results"][impl] = result
        print(f"{impl:>6}: compile {result['compile_s']:.1f}s  step {1000 * result['step_s_median']:.1f} ms "
              f"(min {1000 * result['step_s_min']:.1f})  {result['tokens_per_s']:,.0f} tok/s  "
              f"{result['model_flops_per_s'] / 1e9:.2f} model GFLOP/s  "
              f"MoE layer fwd {result['moe_layer_forward_ms']:.2f} ms", flush=True)
    r, d = report["results"]["ragged"], report["results"]["dense"]
    report["speedup_ragged_over_dense"] = d["step_s_median"] / r["step_s_median"]
    print(f"ragged_dot dispatch is {report['speedup_ragged_over_dense']:.2f}x the dense control's step rate "
          f"({base.n_experts} experts, top-{base.top_k}, {base.active_params():,} active params/token, "
          f"{jax.default_backend()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
