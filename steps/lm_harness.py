"""lm-evaluation-harness over our trained MoE: a small `LM` adapter and local YAML tasks.

`HarnessLM` answers lm-eval's `loglikelihood` (context, continuation) and `loglikelihood_rolling`
requests with the same jitted forward pass the eval step uses; `run_tasks` evaluates the YAML tasks
in steps/eval_tasks/lm_eval/ (local JSONL data, nothing fetched). lm-eval is an optional extra:
`uv sync --extra lm-eval` (the dev group has it too).
"""

from __future__ import annotations

from steps.extras import TRAIN, require_extra

require_extra("train", "steps.lm_harness", TRAIN)

import math
import os
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from steps.eval.lm import TrainedModel, stream_windows
from steps.train.model import forward, token_nll

TASKS_DIR = Path(__file__).resolve().parent / "eval_tasks" / "lm_eval"
INSTALL_HINT = "lm-eval is not installed: `uv sync --extra lm-eval` (or `pip install 'stepgraph[lm-eval]'`)"


def task_config(name: str) -> dict[str, Any]:
    """The YAML task `name`, its data file made absolute (it lives next to steps/eval_tasks/)."""
    import yaml

    path = TASKS_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in TASKS_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"lm-eval task {name!r} not found in {TASKS_DIR}; known: {known}")
    config = yaml.safe_load(path.read_text())
    config["dataset_kwargs"]["data_files"] = {split: str(TASKS_DIR.parent / f"{name}.jsonl")
                                              for split in config["dataset_kwargs"]["data_files"]}
    return config


def _scorer(model: TrainedModel):
    """(inputs, targets, mask) -> (masked nats per row, 1 where every masked target is the argmax)."""
    @jax.jit
    def score(params, bias, inputs, targets, mask):
        logits, _ = forward(params, bias, inputs, model.cfg)
        nats = jnp.sum(token_nll(logits, targets) * mask, axis=-1)
        greedy = jnp.all((jnp.argmax(logits, axis=-1) == targets) | (mask == 0), axis=-1)
        return nats, greedy
    return lambda i, t, m: score(model.params, model.router_bias, i, t, m)


def _make_lm_class():
    from lm_eval.api.model import LM

    class HarnessLM(LM):
        """Our model behind lm-eval's LM interface; texts are encoded with the cache's tokenizer."""

        def __init__(self, model: TrainedModel, encode, eos_id: int, batch_size: int = 16):
            super().__init__()
            self.model, self.encode, self.eos_id, self.batch_size = model, encode, eos_id, batch_size
            self._score = _scorer(model)

        def _rows(self, inputs, targets, mask) -> tuple[np.ndarray, np.ndarray]:
            n, b = len(inputs), self.batch_size
            pad = (-n) % b
            if pad:
                inputs, targets, mask = (np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
                                         for a in (inputs, targets, mask))
            nats, greedy = zip(*(self._score(inputs[i:i + b], targets[i:i + b], mask[i:i + b])
                                 for i in range(0, len(inputs), b)))
            return np.concatenate(nats).astype(np.float64)[:n], np.concatenate(greedy)[:n]

        def loglikelihood(self, requests) -> list[tuple[float, bool]]:
            # Context and continuation are encoded apart (as our own scorer does); the window keeps
            # the last seq_len + 1 tokens, the continuation's always scored.
            seq_len = self.model.cfg.seq_len
            inputs = np.zeros((len(requests), seq_len), np.int32)
            targets, mask = np.zeros_like(inputs), np.zeros((len(requests), seq_len), np.float32)
            for r, request in enumerate(requests):
                context, continuation = request.args
                prompt = self.encode(context) if context else [self.eos_id]
                cont = self.encode(continuation)
                ids = (prompt + cont)[-(seq_len + 1):]
                n, n_cont = len(ids) - 1, min(len(cont), len(ids) - 1)
                inputs[r, :n], targets[r, :n] = ids[:-1], ids[1:]
                mask[r, n - n_cont:n] = 1
            nats, greedy = self._rows(inputs, targets, mask)
            return [(-float(x), bool(g)) for x, g in zip(nats, greedy)]

        def loglikelihood_rolling(self, requests) -> list[float]:
            # The whole text after an EOS, in windows of seq_len: what bits-per-byte measures.
            out = []
            for request in requests:
                (text,) = request.args
                inputs, targets, mask = stream_windows(np.array([self.eos_id] + self.encode(text)),
                                                       self.model.cfg.seq_len)
                out.append(-float(self._rows(inputs, targets, mask)[0].sum()))
            return out

        def generate_until(self, requests):
            raise NotImplementedError("generation tasks are not supported by the stepgraph adapter; "
                                      "use loglikelihood or multiple_choice tasks")

    return HarnessLM


def harness_lm(model: TrainedModel, encode, eos_id: int, batch_size: int = 16):
    """An lm-eval `LM` over `model`; `encode(text) -> list[int]`."""
    return _make_lm_class()(model, encode, eos_id, batch_size)


def run_tasks(model: TrainedModel, encode, eos_id: int, tasks: tuple[str, ...], batch_size: int = 16) -> dict:
    """lm-eval results per task: {task: {"acc": ..., "acc_norm": ..., "items": n, ...}}."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only: nothing may be fetched
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from lm_eval import evaluator
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    lm = harness_lm(model, encode, eos_id, batch_size)
    out = evaluator.simple_evaluate(model=lm, tasks=[task_config(t) for t in tasks], num_fewshot=0,
                                    bootstrap_iters=0, log_samples=False, verbosity="ERROR")
    found = {}
    for task in tasks:
        metrics = out["results"][task]
        found[task] = {"num_fewshot": 0, "items": int(out["n-samples"][task]["effective"]),
                       **{k.split(",")[0]: v for k, v in metrics.items()
                          if isinstance(v, float) and not k.split(",")[0].endswith("_stderr")
                          and not math.isnan(v)}}
    return found


def lm_eval_results(model: TrainedModel, tokenizer: Any, eos_id: int, tasks: tuple[str, ...], batch_size: int) -> dict:
    """The eval step's `lm_eval` entry; without lm-eval installed, a note saying how to install it."""
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    try:
        return run_tasks(model, encode, eos_id, tasks, batch_size)
    except ImportError as e:
        warnings.warn(str(e), stacklevel=2)
        return {"skipped": INSTALL_HINT}
