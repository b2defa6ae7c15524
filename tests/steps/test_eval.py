"""The eval step: bits-per-byte against a straightforward reference, the baselines, the
multiple-choice scorer, and a trained tiny model beating the unigram baseline."""

from __future__ import annotations

import json
import math
import os
from collections import Counter

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                               " --xla_llvm_disable_expensive_passes=true").strip()

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from steps.token_cache import TokenSplit  # noqa: E402
from tests.steps.test_train import tiny_config  # noqa: E402

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax

MAX_EVAL_TOKENS = 700


def train_and_evaluate(root):
    """A tiny model trained 40 steps and evaluated: tests/steps/conftest.py's session fixture
    `trained`, shared by this module and test_lm_harness.py (trained once, not once per module)."""
    from steps.eval import EvalConfig, evaluate
    from steps.train import train
    from steps.train.synthetic import write_synthetic_cache

    cache = str(write_synthetic_cache(root / "tokens", n_train=300, n_validation=30))
    train(tiny_config(cache, root / "train", num_steps=40, checkpoint_every=10, keep_checkpoints=2))
    results = evaluate(EvalConfig(train_path=str(root / "train"), cache_path=cache, output_path=str(root / "eval"),
                                  max_eval_tokens=MAX_EVAL_TOKENS, batch_size=8))
    return root, cache, results


def reference_bits_per_byte(train_path: str, cache: str, max_tokens: int) -> tuple[float, float]:
    """Document by document, window by window, no padding, float64 log-softmax; and unigram."""
    import jax

    from steps.eval.lm import load_trained_model
    from steps.train.model import forward

    model = load_trained_model(train_path)
    val = TokenSplit.open(cache, "validation")
    docs, n_bytes, n = [], 0, 0
    for ids, b in val.documents():
        if docs and n + len(ids) > max_tokens:
            break
        docs.append(ids)
        n, n_bytes = n + len(ids), n_bytes + b
    stream = [val.eos_id] + [int(t) for d in docs for t in d]
    L = model.cfg.seq_len
    model_logits = jax.jit(lambda x: forward(model.params, model.router_bias, x, model.cfg)[0][0])
    nats = 0.0
    for lo in range(0, len(stream) - 1, L):
        inputs = np.array([stream[lo:lo + L]])
        targets = stream[lo + 1:lo + 1 + inputs.shape[1]]
        inputs = inputs[:, :len(targets)]
        logits = np.asarray(model_logits(inputs), np.float64)
        logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        nats += float(sum(logz[i] - logits[i, t] for i, t in enumerate(targets)))
    counts = Counter(int(t) for shard in TokenSplit.open(cache, "train").tokens for t in shard)
    total = sum(counts.values()) + val.vocab_size
    unigram_bits = sum(-math.log2((counts[t] + 1) / total) for t in stream[1:])
    return nats / math.log(2) / n_bytes, unigram_bits / n_bytes


def test_bits_per_byte_matches_a_straightforward_reference(trained):
    root, cache, results = trained
    model_bpb, unigram_bpb = reference_bits_per_byte(str(root / "train"), cache, MAX_EVAL_TOKENS)
    assert results["model"]["bits_per_byte"] == pytest.approx(model_bpb, rel=1e-5)
    assert results["baselines"]["unigram_bits_per_byte"] == pytest.approx(unigram_bpb, rel=1e-9)
    v = results["validation"]
    assert results["model"]["loss"] * v["tokens"] / math.log(2) / v["bytes"] == pytest.approx(model_bpb, rel=1e-5)
    assert results["model"]["perplexity"] == pytest.approx(math.exp(results["model"]["loss"]))
    assert json.loads((root / "eval" / "results.json").read_text()) == json.loads(json.dumps(results))


def test_tiny_trained_model_beats_the_unigram_baseline(trained):
    _, _, results = trained
    b = results["baselines"]
    assert results["model"]["bits_per_byte"] < b["unigram_bits_per_byte"] < b["uniform_bits_per_byte"]
    assert 0 < b["zstd_bits_per_byte"] < 8
    assert b["zstd_text_bytes"] == results["validation"]["bytes"]   # decoding recovers the text
    mc = results["multiple_choice"]
    assert mc["items"] == 24 and 0 <= mc["acc"] <= 1 and mc["chance"] == pytest.approx(0.25)


def test_multiple_choice_scores_only_the_choice_tokens():
    """With 'nats' = sum of the masked target ids, the choice with the smallest ids must win,
    whatever the context and few-shot prefix contain."""
    from steps.eval.multiple_choice import score_task

    items = [{"context": "zz", "choices": ["ab", "a", "zzz"], "answer": 1},
             {"context": "q", "choices": ["yy", "bb"], "answer": 1}]
    encode = lambda text: [ord(c) - 96 for c in text]  # noqa: E731

    def score_rows(inputs, targets, mask):
        return (targets * mask).sum(-1)
    result = score_task(items, encode, score_rows, seq_len=16, num_fewshot=1)
    assert result["acc"] == 1.0 and result["items"] == 2
    assert result["chance"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_shipped_task_file_is_well_formed():
    from steps.eval.multiple_choice import load_task

    items, sha = load_task("shakespeare_completions")
    assert len(items) == 24 and len(sha) == 64
    assert len({it["answer"] for it in items}) > 1        # answers are not all in one position
    with pytest.raises(FileNotFoundError, match="known: .*shakespeare_completions"):
        load_task("nope")


def test_each_choice_is_scored_by_its_tokens_given_all_that_precedes_them():
    """score_rows sees, per (item, choice), the inputs ids[:-1] and targets ids[1:] of few-shot
    prefix + context + choice (cut to seq_len + 1 from the left), masked to the choice's tokens:
    a bigram cost table makes every input and target count."""
    from steps.eval.multiple_choice import score_task

    items = [{"context": "The sky is ", "choices": [" blue", " green", " a very long red"], "answer": 0},
             {"context": "Grass, in spring, is ", "choices": [" green", " blue"], "answer": 0},
             {"context": "x", "choices": [" y", " zz"], "answer": 1}]
    encode = lambda text: list(text.encode())  # noqa: E731
    table = np.random.default_rng(0).random((256, 256))
    seen: list[np.ndarray] = []

    def score_rows(inputs, targets, mask):
        seen.append(nats := (table[inputs, targets] * mask).sum(-1))
        return nats

    seq_len = 24
    result = score_task(items, encode, score_rows, seq_len=seq_len, num_fewshot=1)
    expected, correct = [], 0
    for i, item in enumerate(items):
        shot = items[(i + 1) % len(items)]
        prompt = encode(shot["context"] + shot["choices"][shot["answer"]] + "\n\n" + item["context"])
        costs = []
        for choice in item["choices"]:
            ids = (prompt + encode(choice))[-(seq_len + 1):]
            n = min(len(encode(choice)), len(ids) - 1)
            costs.append(sum(table[ids[k], ids[k + 1]] for k in range(len(ids) - 1 - n, len(ids) - 1)))
        expected += costs
        correct += int(np.argmin(costs) == item["answer"])
    np.testing.assert_allclose(np.concatenate(seen), expected, rtol=1e-12)
    assert result["acc"] == correct / len(items)


def test_a_task_whose_answer_is_not_an_index_of_its_choices_is_refused(tmp_path, monkeypatch):
    import steps.eval.multiple_choice as mc
    from steps.eval.multiple_choice import load_task

    monkeypatch.setattr(mc, "TASKS_DIR", tmp_path)
    for answer in (2, -1):
        (tmp_path / "bad.jsonl").write_text(json.dumps({"context": "c", "choices": ["a", "b"], "answer": answer}) + "\n")
        with pytest.raises(ValueError, match=rf"bad.jsonl:1: answer={answer} is not an index into"):
            load_task("bad")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"context": "c", "choices": ["a", "b"], "answer": 1}) + "\n")
    assert load_task("bad")[0][0]["answer"] == 1
