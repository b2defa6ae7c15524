"""Loading a trained model from a train step's output, and its loss over a token stream.

bits-per-byte = (total nats over every predicted token) / ln 2 / (total UTF-8 bytes of the
documents). The stream is the documents' tokens (each ends with EOS) with one EOS prepended, so
every token of every document, its EOS included, is predicted exactly once; windows of seq_len
targets are scored with the full preceding context inside the window.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass


from executor import url_to_fs
import jax
import jax.numpy as jnp
import numpy as np

from steps.train import checkpoint
from steps.train.config import ModelConfig
from steps.train.loop import MODEL_SUBDIR
from steps.train.model import init_params, init_router_bias, sequence_nll


@dataclass
class TrainedModel:
    cfg: ModelConfig
    params: dict
    router_bias: jax.Array
    step: int


def load_trained_model(train_path: str) -> TrainedModel:
    fs, p = url_to_fs(f"{train_path.rstrip('/')}/model.json")
    try:
        meta = json.loads(fs.cat_file(p))
    except FileNotFoundError:
        raise FileNotFoundError(f"{train_path}: no model.json (is this a train step's output?)") from None
    cfg = ModelConfig(**meta["model"])
    step = checkpoint.latest_complete(train_path, subdir=MODEL_SUBDIR)
    if step is None:
        raise FileNotFoundError(f"{train_path}/{MODEL_SUBDIR}: no complete final model (did training finish?)")
    template = jax.eval_shape(lambda: {"params": init_params(cfg, jax.random.key(0)),
                                       "router_bias": init_router_bias(cfg)})
    state = jax.tree.map(jnp.asarray, checkpoint.restore(train_path, step, template, subdir=MODEL_SUBDIR))
    return TrainedModel(cfg, state["params"], state["router_bias"], step)


def make_scorer(model: TrainedModel):
    """(inputs [B, T], targets [B, T], mask [B, T]) -> masked nats per row, jitted."""
    @jax.jit
    def score(params, bias, inputs, targets, mask):
        nll, _ = sequence_nll(params, bias, inputs, targets, model.cfg)  # never holds full logits
        return jnp.sum(nll * mask, axis=-1)
    return lambda inputs, targets, mask: score(model.params, model.router_bias, inputs, targets, mask)


def stream_windows(stream: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut a stream into (inputs, targets, mask) windows that predict stream[1:] exactly once."""
    n_pred = len(stream) - 1
    n_windows = max(1, math.ceil(n_pred / seq_len))
    inputs = np.zeros((n_windows, seq_len), np.int32)
    targets = np.zeros((n_windows, seq_len), np.int32)
    mask = np.zeros((n_windows, seq_len), np.float32)
    for w in range(n_windows):
        lo = w * seq_len
        n = min(seq_len, n_pred - lo)
        inputs[w, :n] = stream[lo:lo + n]
        targets[w, :n] = stream[lo + 1:lo + 1 + n]
        mask[w, :n] = 1
    return inputs, targets, mask


def score_in_batches(score, inputs: np.ndarray, targets: np.ndarray, mask: np.ndarray,
                     batch_size: int) -> np.ndarray:
    """Masked nats per row, in fixed-size batches (padded, so one compilation serves all)."""
    n = len(inputs)
    pad = (-n) % batch_size
    if pad:
        inputs, targets, mask = (np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
                                 for a in (inputs, targets, mask))
    out = [np.asarray(score(inputs[b:b + batch_size], targets[b:b + batch_size], mask[b:b + batch_size]))
           for b in range(0, len(inputs), batch_size)]
    return np.concatenate(out).astype(np.float64)[:n]


def total_nats(score, stream: np.ndarray, seq_len: int, batch_size: int) -> float:
    """Nats of every token of stream[1:] under `score` (from make_scorer)."""
    inputs, targets, mask = stream_windows(stream, seq_len)
    return float(score_in_batches(score, inputs, targets, mask, batch_size).sum())
