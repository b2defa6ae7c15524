"""lm-evaluation-harness through our LM adapter: the Shakespeare completions YAML task scores the
same accuracy as our own multiple-choice scorer on the same checkpoint, and rolling
log-likelihood equals the eval step's nats; the eval step puts lm-eval results in results.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from steps.token_cache import TokenSplit
from tests.steps.test_eval import MAX_EVAL_TOKENS  # `trained` is tests/steps/conftest.py's session fixture

pytest.importorskip("lm_eval", reason="lm-eval is a dev/extra dependency (uv sync --extra lm-eval)")

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def loaded(root, cache):
    from steps.eval.lm import load_trained_model
    from steps.eval.step import _tokenizer

    model = load_trained_model(str(root / "train"))
    tokenizer = _tokenizer(cache)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    return model, encode, TokenSplit.open(cache, "validation").eos_id


@pytest.mark.slow  # the eval step's test below checks the same accuracy through the step
def test_lm_eval_task_accuracy_equals_our_scorer(trained):
    from steps.eval.lm import make_scorer, score_in_batches
    from steps.eval.multiple_choice import load_task, score_task
    from steps.lm_harness import run_tasks

    root, cache, _ = trained
    model, encode, eos = loaded(root, cache)
    score = make_scorer(model)
    items, _ = load_task("shakespeare_completions")
    ours = score_task(items, encode, lambda i, t, m: score_in_batches(score, i, t, m, 8), model.cfg.seq_len, 0)
    theirs = run_tasks(model, encode, eos, ("shakespeare_completions",), batch_size=8)["shakespeare_completions"]
    assert theirs["items"] == ours["items"] == 24
    assert theirs["acc"] == pytest.approx(ours["acc"]) and theirs["acc_norm"] == pytest.approx(ours["acc_norm"])


def test_adapter_loglikelihoods_match_a_one_row_reference(trained):
    """Each (context, choice) scored alone (one row, padded to seq_len) against the adapter's batch."""
    from lm_eval.api.instance import Instance

    from steps.eval.lm import make_scorer
    from steps.eval.multiple_choice import load_task
    from steps.lm_harness import harness_lm

    root, cache, _ = trained
    model, encode, eos = loaded(root, cache)
    score = make_scorer(model)
    items, _ = load_task("shakespeare_completions")
    pairs = [(item["context"], choice) for item in items[:6] for choice in item["choices"]]
    answers = harness_lm(model, encode, eos, batch_size=8).loglikelihood(
        [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)])
    for (context, choice), (ll, _) in zip(pairs, answers, strict=True):
        ids = (encode(context) + encode(choice))[-(model.cfg.seq_len + 1):]  # the window keeps the end
        n = len(ids) - 1
        n_choice = min(len(encode(choice)), n)
        inputs, targets = np.zeros((1, model.cfg.seq_len), np.int32), np.zeros((1, model.cfg.seq_len), np.int32)
        mask = np.zeros((1, model.cfg.seq_len), np.float32)
        inputs[0, :n], targets[0, :n], mask[0, n - n_choice:n] = ids[:-1], ids[1:], 1
        reference = float(score(inputs, targets, mask)[0])
        assert ll == pytest.approx(-reference, rel=1e-5)


def test_rolling_loglikelihood_is_the_eval_steps_nats(trained):
    from lm_eval.api.instance import Instance

    from steps.eval.lm import make_scorer, total_nats
    from steps.lm_harness import harness_lm

    root, cache, _ = trained
    model, encode, eos = loaded(root, cache)
    text = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer " * 4
    lm = harness_lm(model, encode, eos, batch_size=8)
    [rolling] = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    expected = total_nats(make_scorer(model), np.array([eos] + encode(text)), model.cfg.seq_len, 8)
    assert rolling == pytest.approx(-expected, rel=1e-6)
    [(ll, greedy)] = lm.loglikelihood([Instance("loglikelihood", {}, ("To be, or not to be, that is the", " question"), 0)])
    assert ll < 0 and isinstance(greedy, bool)


def test_the_eval_step_writes_lm_eval_results(trained, tmp_path):
    from steps.eval import EvalConfig, evaluate

    root, cache, _ = trained
    results = evaluate(EvalConfig(train_path=str(root / "train"), cache_path=cache, output_path=str(tmp_path),
                                  max_eval_tokens=MAX_EVAL_TOKENS, batch_size=8, num_fewshot=0,
                                  lm_eval_tasks=("shakespeare_completions",)))
    stored = json.loads((tmp_path / "results.json").read_text())
    harness = stored["lm_eval"]["shakespeare_completions"]
    assert harness["acc"] == pytest.approx(stored["multiple_choice"]["acc"]) and harness["items"] == 24
    assert "bits_per_byte" in stored["model"] and results["lm_eval"] == stored["lm_eval"]

    from experiments.tiny_moe import SummaryConfig, summarize  # the quickstart's summary shows it

    (tmp_path / "summary").mkdir()
    summarize(SummaryConfig(eval_path=str(tmp_path), train_path=str(root / "train"),
                            output_path=str(tmp_path / "summary")))
    summary = (tmp_path / "summary" / "summary.txt").read_text()
    assert f"lm-eval shakespeare_completions: acc {harness['acc']:.2f}" in summary


def test_unknown_lm_eval_task_names_the_known_ones():
    from steps.lm_harness import task_config

    with pytest.raises(FileNotFoundError, match="known: .*shakespeare_completions"):
        task_config("nope")
