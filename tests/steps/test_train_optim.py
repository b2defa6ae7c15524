"""The optimizer: which leaves get weight decay, the two schedules, and the Muon option."""

from __future__ import annotations

import numpy as np
import pytest


# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def small_config():
    from steps.train.config import ModelConfig

    return ModelConfig(vocab_size=20, seq_len=8, d_model=16, n_heads=2, n_layers=2, n_dense=1, d_ff=16,
                       n_experts=4, top_k=2, d_expert=8, n_shared=1)


def test_weight_decay_skips_norms_embedding_and_router():
    import jax
    from steps.train.model import init_params
    from steps.train.optim import _key_names, decay_mask, learning_rate_schedule, make_optimizer
    CFG = small_config()

    params = init_params(CFG, jax.random.key(0))
    flat = jax.tree_util.tree_flatten_with_path(decay_mask(params))[0]
    decayed = {"/".join(_key_names(p)) for p, flag in flat if flag}
    skipped = {"/".join(_key_names(p)) for p, flag in flat if not flag}
    assert "embed" in skipped and "final_norm" in skipped and "layers/0/attn_norm" in skipped
    assert "layers/1/moe/router" in skipped
    assert {"unembed", "layers/0/wq", "layers/0/mlp/w_up", "layers/1/moe/experts/w_down",
            "layers/1/moe/shared/w_gate"} <= decayed


def test_cosine_and_wsd_schedules():
    from steps.train.config import ModelConfig, OptimizerConfig
    from steps.train.optim import _key_names, decay_mask, learning_rate_schedule, make_optimizer

    cos = learning_rate_schedule(OptimizerConfig(learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.1), 100)
    assert float(cos(0)) == 0.0 and float(cos(10)) == pytest.approx(1.0)
    assert float(cos(100)) == pytest.approx(0.1) and float(cos(55)) < 1.0
    wsd = learning_rate_schedule(OptimizerConfig(learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.0,
                                                 schedule="wsd", decay_fraction=0.2), 100)
    assert float(wsd(5)) == pytest.approx(0.5)
    assert float(wsd(10)) == float(wsd(79)) == pytest.approx(1.0)          # stable phase
    assert float(wsd(90)) == pytest.approx(0.5) and float(wsd(100)) == pytest.approx(0.0)


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_optimizers_update_every_parameter(kind):
    import jax
    import jax.numpy as jnp
    from steps.train.config import ModelConfig, OptimizerConfig
    from steps.train.model import init_params
    from steps.train.optim import _key_names, decay_mask, learning_rate_schedule, make_optimizer
    CFG = small_config()

    params = init_params(CFG, jax.random.key(0))
    opt = make_optimizer(OptimizerConfig(kind=kind, warmup_steps=0), 10)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = jax.jit(opt.update)(grads, opt.init(params), params)
    for leaf in jax.tree.leaves(updates):
        assert np.all(np.isfinite(leaf)) and np.any(leaf != 0)
