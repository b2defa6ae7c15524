"""Aux-loss-free balancing: the train step itself moves the router bias, against the load."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def small_model():
    from steps.train.config import ModelConfig

    return ModelConfig(vocab_size=20, seq_len=8, d_model=16, n_heads=2, n_layers=2, n_dense=1, d_ff=16,
                       n_experts=4, top_k=2, d_expert=8, n_shared=1)


def one_step(cfg) -> tuple[dict, dict, dict]:
    import jax

    from steps.train.config import OptimizerConfig
    from steps.train.optim import make_optimizer
    from steps.train.state import init_state, make_train_step

    optimizer = make_optimizer(OptimizerConfig(warmup_steps=0), 10)
    state = init_state(cfg, optimizer, seed=0)
    batch = jax.random.randint(jax.random.key(1), (4, cfg.seq_len + 1), 0, cfg.vocab_size)
    new_state, metrics = jax.jit(make_train_step(cfg, optimizer))(state, batch)
    return state, new_state, metrics


def test_aux_free_train_step_moves_the_bias_against_the_load():
    import jax.numpy as jnp

    from_a_flag = "".join(["aux_", "free"])  # built at run time, as a parsed flag or file is: not interned
    cfg = dataclasses.replace(small_model(), balance=from_a_flag, bias_update_rate=0.01)
    state, new_state, metrics = one_step(cfg)
    assert new_state["step"] == state["step"] + 1 and new_state["step"].dtype == jnp.int32  # the state's step counter
    delta = np.asarray(new_state["router_bias"] - state["router_bias"])
    counts = np.asarray(metrics["expert_counts"])
    assert np.any(delta != 0), "the router bias did not move"
    mean = counts.mean(axis=-1, keepdims=True)
    # over-loaded experts go down, under-loaded go up, by exactly the rate
    np.testing.assert_allclose(delta, 0.01 * np.sign(mean - counts), atol=1e-7)


def test_aux_loss_mode_leaves_the_bias_alone():
    import jax.numpy as jnp

    cfg = dataclasses.replace(small_model(), balance="aux_loss")
    state, new_state, _ = one_step(cfg)
    assert jnp.array_equal(new_state["router_bias"], state["router_bias"])
