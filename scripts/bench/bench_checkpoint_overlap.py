"""Step time with and without a checkpoint save in flight (the trainer's CheckpointWriter).

    python scripts/bench/bench_checkpoint_overlap.py                  # small MoE, ~200 MB of state
    python scripts/bench/bench_checkpoint_overlap.py --preset tiny --steps 6 --json out.json

Trains with the jitted train step and saves through `steps.train.loop.CheckpointWriter` into a
temporary directory (or --out), as `train()` does: the save copies the state to host memory (the
only pause of the training loop) and writes the files in a background thread while steps go on.
Reports the median step time without a save, the median of the steps that ran while a save was
in flight, the pause each save cost the loop (background and synchronous), and how long the
background write took. Runs without Ray or draccus (as bench_gpu_mfu.py does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig  # noqa: E402
from steps.train.loop import CheckpointWriter  # noqa: E402
from steps.train.optim import make_optimizer  # noqa: E402
from steps.train.state import init_state, make_train_step  # noqa: E402

PRESETS = {  # (model, batch size)
    # much state for little compute (a large vocabulary, short sequences): a save spans many steps
    "small": (ModelConfig(vocab_size=32768, seq_len=32, d_model=256, n_heads=4, n_layers=2, n_dense=1, d_ff=512,
                          n_experts=4, top_k=2, d_expert=128, n_shared=1), 2),
    "tiny": (ModelConfig(vocab_size=512, seq_len=64, d_model=64, n_heads=4, n_layers=2, n_dense=1, d_ff=128,
                         n_experts=4, top_k=2, d_expert=32, n_shared=1), 4),
}


def _timed_steps(step, state, batch, n: int, until=None) -> tuple[dict, list[float]]:
    """Run `n` steps (or, with `until`, steps until it returns True; at least one), timing each."""
    times = []
    while (until is None and len(times) < n) or (until is not None and (not times or not until())):
        t = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics["loss"])
        times.append(time.perf_counter() - t)
    return state, times


def measure(cfg: ModelConfig, batch_size: int, steps: int, out: str, compute_dtype: str = "float32") -> dict:
    optimizer = make_optimizer(OptimizerConfig(), 1000)
    state = init_state(cfg, optimizer, 0)
    batch = jax.device_put(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch_size, cfg.seq_len + 1))
                           .astype(np.int32))
    step = jax.jit(make_train_step(cfg, optimizer, compute_dtype=compute_dtype), donate_argnums=(0,))
    config = TrainConfig(cache_path="unused", output_path=out, keep_checkpoints=2)
    state, _ = _timed_steps(step, state, batch, 2)                       # compile and warm up
    state, without = _timed_steps(step, state, batch, steps)
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))

    background = CheckpointWriter(background=True)
    try:
        t = time.perf_counter()
        background.save(config, out, 1, state, [])
        pause = time.perf_counter() - t
        state, during = _timed_steps(step, state, batch, 0, until=lambda: not background.in_flight())
        background.wait()
        write_s = time.perf_counter() - t
    finally:
        background.close()
    synchronous = CheckpointWriter(background=False)
    t = time.perf_counter()
    synchronous.save(config, out, 2, state, [])
    sync_pause = time.perf_counter() - t
    return {"device": f"{jax.devices()[0].platform}:{getattr(jax.devices()[0], 'device_kind', '')}",
            "jax": jax.__version__, "compute_dtype": compute_dtype, "state_mb": state_bytes / 2**20,
            "step_s_median_without_save": statistics.median(without),
            "step_s_median_with_save_in_flight": statistics.median(during), "steps_during_save": len(during),
            "background_save_pause_s": pause, "background_save_total_s": write_s,
            "synchronous_save_pause_s": sync_pause}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--steps", type=int, default=10, help="timed steps without a save")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--out", help="where checkpoints go (default: a temporary directory)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    cfg, batch_size = PRESETS[args.preset]
    with tempfile.TemporaryDirectory() as tmp:
        report = {"preset": args.preset, "batch_size": batch_size,
                  **measure(cfg, batch_size, args.steps, args.out or tmp, args.dtype)}
    print(f"{report['device']} preset {args.preset} ({report['state_mb']:.0f} MB of state): step "
          f"{report['step_s_median_without_save'] * 1e3:.1f} ms without a save, "
          f"{report['step_s_median_with_save_in_flight'] * 1e3:.1f} ms with one in flight "
          f"({report['steps_during_save']} steps during a {report['background_save_total_s']:.2f} s save); "
          f"the loop paused {report['background_save_pause_s'] * 1e3:.0f} ms for a background save, "
          f"{report['synchronous_save_pause_s'] * 1e3:.0f} ms for a synchronous one", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
