"""The training canary: train a small MoE end to end on real text and fail unless it beats the
unigram baseline by a margin.

    uv run python -m steps.train.canary                 # exit 0: pass, 1: fail, 2: bad usage

Pipeline (in process, in a temporary directory): the first `--docs` documents of the committed
Shakespeare sample -> a byte-level BPE (512 tokens) and a token cache -> `train` (a 2-layer MoE,
4 experts top-2) -> `evaluate` on the held-out documents -> model bits-per-byte must be at least
`--margin` below the unigram baseline scored on the same documents. A broken model, optimizer,
loss, data order or eval shows up as a model no better than token frequencies.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data/shakespeare/shakespeare.jsonl.zst"
DEFAULT_MARGIN = 0.5     # bits per byte below unigram (measured: ~0.8-0.9 at the defaults)


def sample_texts(n_docs: int) -> list[str]:
    import zstandard

    with SAMPLE.open("rb") as raw:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(raw), encoding="utf-8")
        texts = []
        for line in reader:
            texts.append(json.loads(line)["text"])
            if len(texts) == n_docs:
                break
    return texts


def run_canary(workdir: Path, n_docs: int, steps: int, seed: int = 0) -> dict:
    from steps.eval import EvalConfig, evaluate
    from steps.train import ModelConfig, OptimizerConfig, TrainConfig, train
    from steps.train.synthetic import write_cache

    texts = sample_texts(n_docs)
    n_val = max(2, n_docs // 20)
    cache = write_cache(workdir / "tokens", {"train": texts[:-n_val], "validation": texts[-n_val:]}, vocab_size=512)
    model = ModelConfig(seq_len=64, d_model=64, n_heads=4, n_layers=2, n_dense=1, d_ff=128,
                        n_experts=4, top_k=2, d_expert=32, n_shared=1)
    trained = train(TrainConfig(cache_path=str(cache), output_path=str(workdir / "train"), model=model,
                                batch_size=16, num_steps=steps, seed=seed, checkpoint_every=steps, log_every=10,
                                optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=10)))
    results = evaluate(EvalConfig(train_path=str(workdir / "train"), cache_path=str(cache),
                                  output_path=str(workdir / "eval"), max_eval_tokens=20_000, task=None))
    return {"model_bpb": results["model"]["bits_per_byte"],
            "unigram_bpb": results["baselines"]["unigram_bits_per_byte"], "final_loss": trained["final_loss"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m steps.train.canary", description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=300, help="sample documents to use (5%% held out)")
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help="bits per byte the model must beat the unigram baseline by")
    parser.add_argument("--workdir", help="keep the outputs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.docs < 40 or args.steps < 1:
        print(f"canary: --docs={args.docs} must be >= 40 and --steps={args.steps} >= 1", file=sys.stderr)
        return 2
    if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        # a tiny model: XLA's expensive CPU optimisations cost more compile time than they save
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                                   " --xla_llvm_disable_expensive_passes=true").strip()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="stepgraph-canary-") as tmp:
        r = run_canary(Path(args.workdir or tmp), args.docs, args.steps)
    gap = r["unigram_bpb"] - r["model_bpb"]
    ok = gap >= args.margin
    print(f"canary {'PASS' if ok else 'FAIL'}: model {r['model_bpb']:.3f} bits/byte, unigram {r['unigram_bpb']:.3f}, "
          f"gap {gap:.3f} ({'>=' if ok else '<'} margin {args.margin}) after {args.steps} steps "
          f"in {time.monotonic() - started:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
