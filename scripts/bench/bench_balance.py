"""Load balancing in real training: the tiny MoE trained on the quickstart's Shakespeare tokens
with each balancing mode, in the same run, from the same seed and batches.

    uv run python experiments/tiny_moe.py            # once, for the token cache
    uv run python scripts/bench/bench_balance.py      # none vs aux_free vs aux_loss, 200 steps each

Reports, per mode, the mean over the last quarter of training of max/mean expert load (tokens
routed to the busiest expert over the average, per MoE layer, then averaged over layers: 1.0 is
perfect balance) and the final training loss, and each mode's imbalance as a ratio to `none`.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.tiny_moe import TINY_MODEL  # noqa: E402
from steps.train import OptimizerConfig, TrainConfig, train  # noqa: E402
from steps.train.config import BALANCE_MODES  # noqa: E402


def find_cache(prefix: str) -> str:
    found = sorted(glob.glob(f"{prefix}/tokenized/shakespeare-*/ledger.json"))
    if not found:
        raise SystemExit(f"no token cache under {prefix}/tokenized/: run `uv run python experiments/tiny_moe.py` first")
    return str(Path(found[-1]).parent)


def run_mode(cache: str, mode: str, steps: int, out: Path) -> dict:
    model = dataclasses.replace(TINY_MODEL, balance=mode)
    config = TrainConfig(cache_path=cache, output_path=str(out), model=model, batch_size=16, num_steps=steps,
                         checkpoint_every=steps, log_every=1, optimizer=OptimizerConfig(learning_rate=3e-3,
                                                                                          warmup_steps=20))
    started = time.monotonic()
    result = train(config)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    tail = rows[-max(1, len(rows) // 4):]
    imbalance = statistics.mean(statistics.mean(r["load_max_over_mean"]) for r in tail)
    return {"mode": mode, "imbalance_last_quarter": round(imbalance, 3), "final_loss": round(result["final_loss"], 4),
            "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default="cache", help="where the quickstart wrote its outputs")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    cache = find_cache(args.prefix)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-balance-") as tmp:
        for mode in ("none", *[m for m in BALANCE_MODES if m != "none"]):
            results.append(run_mode(cache, mode, args.steps, Path(tmp) / mode))
            print(json.dumps(results[-1]), flush=True)
    anchor = results[0]["imbalance_last_quarter"]
    print(f"\nmax/mean expert load over the last quarter of {args.steps} steps (1.0 = balanced):")
    for r in results:
        print(f"  {r['mode']:<9} {r['imbalance_last_quarter']:.3f}  ({r['imbalance_last_quarter'] / anchor:.2f}x of none)"
              f"  final loss {r['final_loss']:.4f}")


if __name__ == "__main__":
    main()
