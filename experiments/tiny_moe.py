"""Quickstart: a tiny DeepSeek-style MoE trained on Shakespeare, on 2 CPU cores in minutes.

    uv run python experiments/tiny_moe.py             # download -> dedup -> tokenize -> train -> eval
    uv run python experiments/tiny_moe.py             # again: every step is skipped, instantly
    uv run python experiments/tiny_moe.py --dry-run   # the plan, with a reason per step
    uv run python experiments/tiny_moe.py --train-steps 400   # train (and eval) again, longer

The data is the committed public-domain sample data/shakespeare/shakespeare.jsonl.zst, named by
a path relative to the repository (read from the checkout wherever it lives, so ids do not depend
on it) and pinned by its sha256 in the download config: new data, new ids downstream. Outputs land
under cache/ in this project (the checkout holding this file, from any working directory; or
--prefix; the run prints it); the last step prints bits-per-byte next to its baselines.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, Resources, executor_main, open_file, output_path_of, this_output_path
from steps.dedup import ExactDedupConfig, exact_dedup
from steps.download import DownloadConfig, download
from steps.eval import EvalConfig, evaluate
from steps.tokenize import TokenizeConfig, tokenize
from steps.train import ModelConfig, OptimizerConfig, TrainConfig, train

REPO = Path(__file__).resolve().parent.parent
SAMPLE = "data/shakespeare/shakespeare.jsonl.zst"   # relative to REPO: ids must not depend on the checkout path


@dataclass(frozen=True)
class TinyMoeOptions:
    train_steps: int = 200  # optimizer steps (train and eval re-run; the data steps are reused)
    vocab_size: int = 2048  # BPE vocabulary (a new tokenizer: everything after download re-runs)
    seed: int = 0  # parameter init and batch order


@dataclass(frozen=True)
class SummaryConfig:
    eval_path: str
    train_path: str
    output_path: str


def summarize(config: SummaryConfig) -> dict:
    """Print bpb next to the baselines and where everything is."""
    with open_file(f"{config.eval_path}/results.json", "r") as f:
        results = json.load(f)
    m, b = results["model"], results["baselines"]
    mc = results.get("multiple_choice", {})
    lines = [
        f"tiny MoE after {results['train_step']} steps, on {results['validation']['tokens']} validation tokens "
        f"({results['validation']['bytes']} bytes):",
        f"  model     {m['bits_per_byte']:.3f} bits/byte   (loss {m['loss']:.3f}, perplexity {m['perplexity']:.1f})",
        f"  unigram   {b['unigram_bits_per_byte']:.3f} bits/byte   (train-split token counts, add-one)",
        f"  zstd -19  {b['zstd_bits_per_byte']:.3f} bits/byte   (compressing the validation text itself)"
        if b.get("zstd_bits_per_byte") is not None else "  zstd      n/a",
        f"  uniform   {b['uniform_bits_per_byte']:.3f} bits/byte",
    ]
    if mc:
        lines.append(f"  {mc['task']}: acc {mc['acc']:.2f} (acc_norm {mc['acc_norm']:.2f}, chance {mc['chance']:.2f}, "
                     f"{mc['items']} items, {mc['num_fewshot']}-shot)")
    for task, scores in results.get("lm_eval", {}).items():
        lines.append(f"  lm-eval {task}: acc {scores['acc']:.2f} (acc_norm {scores['acc_norm']:.2f}, "
                     f"{scores['items']} items, 0-shot)" if isinstance(scores, dict) else f"  lm-eval: {scores}")
    lines += [f"  metrics:  {config.train_path}/metrics.jsonl", f"  results:  {config.eval_path}/results.json"]
    text = "\n".join(lines)
    with open_file(f"{config.output_path}/summary.txt", "w") as f:
        f.write(text + "\n")
    print(text, flush=True)
    zstd = b.get("zstd_bits_per_byte")
    return {"bits_per_byte": f"model {m['bits_per_byte']:.3f} | unigram {b['unigram_bits_per_byte']:.3f} | "
                             f"zstd {zstd:.3f}" if zstd is not None else f"model {m['bits_per_byte']:.3f}",
            "summary": f"{config.output_path}/summary.txt"}


TINY_MODEL = ModelConfig(seq_len=128, d_model=64, n_heads=4, n_layers=3, n_dense=1, d_ff=192,
                         n_experts=8, top_k=2, d_expert=48, n_shared=1)


def data_steps(vocab_size: int = 2048) -> tuple[ExecutorStep, ExecutorStep]:
    """download -> exact dedup -> tokenize; returns (dedup, tokenize) steps."""
    sha = hashlib.sha256((REPO / SAMPLE).read_bytes()).hexdigest()
    raw = ExecutorStep("raw/shakespeare", download,
                       DownloadConfig(sources=[SAMPLE], output_path=this_output_path(),
                                      expected_sha256={Path(SAMPLE).name: sha}, source_root=str(REPO)))
    deduped = ExecutorStep("dedup/shakespeare", exact_dedup,
                           ExactDedupConfig(input_path=output_path_of(raw, "docs"), output_path=this_output_path()))
    tokens = ExecutorStep("tokenized/shakespeare", tokenize,
                          TokenizeConfig(input_path=output_path_of(deduped, "docs"), output_path=this_output_path(),
                                         vocab_size=vocab_size, validation_fraction=0.02, num_output_shards=2))
    return deduped, tokens


def build(options: TinyMoeOptions) -> list[ExecutorStep]:
    _, tokens = data_steps(options.vocab_size)
    trained = ExecutorStep("train/tiny_moe", train,
                           TrainConfig(cache_path=output_path_of(tokens), output_path=this_output_path(),
                                       model=TINY_MODEL, batch_size=16, num_steps=options.train_steps,
                                       seed=options.seed, checkpoint_every=100, log_every=10,
                                       optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=20)),
                           resources=Resources(cpus=2))
    evaluation = ExecutorStep("eval/tiny_moe", evaluate,
                              EvalConfig(train_path=output_path_of(trained), cache_path=output_path_of(tokens),
                                         output_path=this_output_path(), max_eval_tokens=60_000,
                                         lm_eval_tasks=("shakespeare_completions",)))
    summary = ExecutorStep("summary/tiny_moe", summarize,
                           SummaryConfig(eval_path=output_path_of(evaluation), train_path=output_path_of(trained),
                                         output_path=this_output_path()))
    return [summary]


if __name__ == "__main__":
    executor_main(build, "tiny MoE on Shakespeare", config=TinyMoeOptions())
