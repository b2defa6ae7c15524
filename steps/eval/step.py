"""The eval step function: model loss / perplexity / bits-per-byte on the validation split,
the baselines of baselines.py on the same documents, and a few-shot multiple-choice task.
Writes results.json in its output directory and returns the same dict.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass


from executor import url_to_fs
import numpy as np

from executor import execution_only
from steps.eval import baselines
from steps.eval.lm import load_trained_model, make_scorer, score_in_batches, total_nats
from steps.eval.multiple_choice import load_task, score_task
from steps.token_cache import TokenSplit, join
from steps.lm_harness import lm_eval_results
from steps.tracking import Trackers, check_trackers

RESULTS_SCHEMA = 1


@dataclass(frozen=True)
class EvalConfig:
    train_path: str                  # a train step's output directory
    cache_path: str                  # the token cache the model was trained on
    output_path: str
    max_eval_tokens: int = 200_000   # whole validation documents up to this many tokens
    task: str | None = "shakespeare_completions"   # steps/eval_tasks/<task>.jsonl, None to skip
    num_fewshot: int = 2
    zstd_level: int = 19
    batch_size: int = execution_only(16)
    trackers: tuple[str, ...] = execution_only(())  # "wandb", "tensorboard": see steps/tracking.py
    lm_eval_tasks: tuple[str, ...] = ()  # lm-evaluation-harness YAML tasks (steps/eval_tasks/lm_eval/), 0-shot

    def __post_init__(self) -> None:
        if self.max_eval_tokens < 2:
            raise ValueError(f"EvalConfig: max_eval_tokens={self.max_eval_tokens!r} must be >= 2")
        if self.num_fewshot < 0:
            raise ValueError(f"EvalConfig: num_fewshot={self.num_fewshot!r} must be >= 0")
        check_trackers(self.trackers, "EvalConfig")


def select_documents(split: TokenSplit, max_tokens: int) -> tuple[list[np.ndarray], int]:
    """Leading whole documents of the split with at most max_tokens tokens (at least one)."""
    docs, n_bytes, n_tokens = [], 0, 0
    for ids, doc_bytes in split.documents():
        if docs and n_tokens + len(ids) > max_tokens:
            break
        docs.append(ids.astype(np.int64))
        n_bytes += doc_bytes
        n_tokens += len(ids)
    if not docs:
        raise ValueError(f"{split.root}: the {split.split!r} split has no documents to evaluate on")
    return docs, n_bytes


def _tokenizer(cache_path: str):
    fs, path = url_to_fs(join(cache_path, "tokenizer.json"))
    if not fs.exists(path):
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_str(fs.read_text(path, encoding="utf-8"))


def evaluate(config: EvalConfig) -> dict:
    started = time.monotonic()
    model = load_trained_model(config.train_path)
    validation = TokenSplit.open(config.cache_path, "validation")
    docs, n_bytes = select_documents(validation, config.max_eval_tokens)
    stream = np.concatenate([[validation.eos_id]] + docs)
    n_tokens = len(stream) - 1
    score = make_scorer(model)
    nats = total_nats(score, stream, model.cfg.seq_len, config.batch_size)
    results: dict = {
        "schema": RESULTS_SCHEMA, "train_step": model.step,
        "validation": {"documents": len(docs), "tokens": n_tokens, "bytes": n_bytes},
        "model": {"loss": nats / n_tokens, "perplexity": math.exp(nats / n_tokens),
                  "bits_per_byte": nats / math.log(2) / n_bytes},
    }
    vocab = validation.vocab_size
    unigram = baselines.unigram_log_probs(TokenSplit.open(config.cache_path, "train"), vocab)
    results["baselines"] = {
        "uniform_bits_per_byte": baselines.uniform_bpb(vocab, n_tokens, n_bytes),
        "unigram_bits_per_byte": baselines.unigram_bpb(unigram, stream[1:], n_bytes),
    }
    tokenizer = _tokenizer(config.cache_path)
    if tokenizer is not None:
        texts = [tokenizer.decode([int(t) for t in d if t != validation.eos_id]) for d in docs]
        bpb, raw_bytes = baselines.zstd_bpb(texts, config.zstd_level)
        results["baselines"]["zstd_bits_per_byte"] = bpb
        results["baselines"]["zstd_text_bytes"] = raw_bytes
    else:
        results["baselines"]["zstd_bits_per_byte"] = None
        results["baselines"]["zstd_note"] = "no tokenizer.json in the cache: validation text not recoverable"
    if config.task and tokenizer is not None:
        items, sha = load_task(config.task)
        score_rows = lambda i, t, m: score_in_batches(score, i, t, m, config.batch_size)  # noqa: E731
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
        results["multiple_choice"] = {"task": config.task, "task_sha256": sha,
                                      **score_task(items, encode, score_rows, model.cfg.seq_len, config.num_fewshot)}
    if config.lm_eval_tasks and tokenizer is not None:
        results["lm_eval"] = lm_eval_results(model, tokenizer, validation.eos_id, config.lm_eval_tasks, config.batch_size)
    results["seconds"] = time.monotonic() - started
    fs, p = url_to_fs(f"{config.output_path.rstrip('/')}/results.json")
    fs.makedirs(p.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(p, json.dumps(results, indent=1).encode())
    trackers = Trackers(config.trackers, config.output_path, "eval", dataclasses.asdict(config))
    trackers.summary({"step": model.step, **{f"eval/{k}": v for k, v in results["model"].items()}})
    trackers.close()
    return results
