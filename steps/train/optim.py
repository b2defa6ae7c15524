"""The optimizer: global-norm clipping, then AdamW (or Muon on hidden matrices) with a
warmup + cosine or warmup-stable-decay learning-rate schedule.

Weight decay applies to weight matrices only: not to norms, not to the token embedding, not
to the router (its scale sets routing sharpness; decaying it fights the balancing).
"""

from __future__ import annotations

import jax
import optax

from steps.train.config import OptimizerConfig

NO_DECAY_KEYS = ("embed", "router")


def learning_rate_schedule(cfg: OptimizerConfig, num_steps: int) -> optax.Schedule:
    peak, floor = cfg.learning_rate, cfg.learning_rate * cfg.min_lr_ratio
    warmup = min(cfg.warmup_steps, max(num_steps - 1, 0))
    if cfg.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, max(num_steps, warmup + 1), floor)
    decay = max(1, int(round(num_steps * cfg.decay_fraction)))
    stable = max(0, num_steps - warmup - decay)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, warmup) if warmup else optax.constant_schedule(peak),
         optax.constant_schedule(peak),
         optax.linear_schedule(peak, floor, decay)],
        boundaries=[warmup, warmup + stable])


def _key_names(path) -> list[str]:
    return [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]


def decay_mask(params):
    """True for leaves that get weight decay: matrices outside the embedding and router."""
    def decays(path, leaf):
        return leaf.ndim >= 2 and not any(n in NO_DECAY_KEYS for n in _key_names(path))
    return jax.tree_util.tree_map_with_path(decays, params)


def _muon_labels(params):
    def label(path, leaf):
        names = _key_names(path)
        hidden_matrix = leaf.ndim == 2 and not any(n in NO_DECAY_KEYS + ("unembed",) for n in names)
        return "muon" if hidden_matrix else "adamw"
    return jax.tree_util.tree_map_with_path(label, params)


def make_optimizer(cfg: OptimizerConfig, num_steps: int) -> optax.GradientTransformation:
    lr = learning_rate_schedule(cfg, num_steps)
    adamw = optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask)
    if cfg.kind == "adamw":
        inner = adamw
    else:
        muon = optax.contrib.muon(lr, beta=cfg.b1, weight_decay=cfg.weight_decay)
        inner = optax.multi_transform({"muon": muon, "adamw": adamw}, _muon_labels)
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), inner)
