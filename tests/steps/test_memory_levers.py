"""The two memory levers: blockwise cross-entropy (equal loss and gradients to the naive one,
smaller compiled footprint) and per-layer rematerialisation (same loss and gradients)."""

from __future__ import annotations

import dataclasses
import functools
import os

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                               " --xla_llvm_disable_expensive_passes=true").strip()

import numpy as np
import pytest


# float32: the two differ only in summation order (online logsumexp over blocks); measured
# differences are ~1e-8 absolute on these sizes.
RTOL, ATOL = 1e-5, 1e-6

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def small_config():
    from steps.train.config import ModelConfig

    return ModelConfig(vocab_size=300, seq_len=16, d_model=32, n_heads=4, n_layers=3, n_dense=1, d_ff=48,
                       n_experts=6, top_k=2, d_expert=16, n_shared=1, ce_block_size=64, cross_entropy="naive")


def _inputs(n=96, d=24, vocab=1000, seed=0):
    import jax

    k = jax.random.split(jax.random.key(seed), 4)
    h = jax.random.normal(k[0], (n, d))
    w = jax.random.normal(k[1], (d, vocab)) * 0.3
    targets = jax.random.randint(k[2], (n,), 0, vocab)
    weights = jax.random.uniform(k[3], (n,))   # an arbitrary cotangent, not just the mean
    return h, w, targets, weights


@pytest.mark.parametrize("block", [1000, 128, 333])   # one block, many, a ragged last block
def test_blockwise_cross_entropy_equals_naive_in_loss_and_gradients(block):
    import jax
    import jax.numpy as jnp
    from steps.train.cross_entropy import blockwise_nll, naive_nll

    h, w, targets, weights = _inputs()
    naive = lambda h, w: jnp.sum(weights * naive_nll(h, w, targets))  # noqa: E731
    blockwise = lambda h, w: jnp.sum(weights * blockwise_nll(h, w, targets, block))  # noqa: E731
    (la, ga), (lb, gb) = (jax.jit(jax.value_and_grad(f, (0, 1)))(h, w) for f in (naive, blockwise))
    np.testing.assert_allclose(lb, la, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(blockwise_nll(h, w, targets, block), naive_nll(h, w, targets), rtol=RTOL, atol=ATOL)
    for x, y in zip(gb, ga):
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL)


def test_blockwise_cross_entropy_needs_a_fraction_of_the_memory():
    import jax
    import jax.numpy as jnp
    from steps.train.cross_entropy import blockwise_nll, naive_nll

    n, d, vocab = 1024, 64, 32768
    args = (jax.ShapeDtypeStruct((n, d), jnp.float32), jax.ShapeDtypeStruct((d, vocab), jnp.float32),
            jax.ShapeDtypeStruct((n,), jnp.int32))

    def temp_bytes(nll):
        loss = lambda h, w, t: jnp.mean(nll(h, w, t))  # noqa: E731
        compiled = jax.jit(jax.value_and_grad(loss, (0, 1))).lower(*args).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    naive = temp_bytes(naive_nll)
    blockwise = temp_bytes(lambda h, w, t: blockwise_nll(h, w, t, 2048))
    logits_bytes = n * vocab * 4
    assert naive >= logits_bytes                 # the naive loss holds the full logits at least once
    assert blockwise < logits_bytes / 4, (naive, blockwise)


@functools.lru_cache(maxsize=1)
def _params():
    """The parameters of small_config(), initialised once (compiled once, not once per variant)."""
    import jax
    from steps.train import model as M

    return jax.jit(M.init_params, static_argnums=0)(small_config(), jax.random.key(1))


@functools.lru_cache(maxsize=1)
def _baseline():
    CFG = small_config()

    return _loss_and_grads(CFG)


def _loss_and_grads(cfg):
    import jax
    import jax.numpy as jnp
    from steps.train import model as M

    params = _params()   # the levers change no parameter: every variant starts from the same ones
    batch = jax.random.randint(jax.random.key(2), (4, cfg.seq_len + 1), 0, cfg.vocab_size)
    bias = jnp.linspace(-0.05, 0.05, cfg.n_experts * cfg.n_moe).reshape(cfg.n_moe, cfg.n_experts)
    fn = jax.jit(jax.value_and_grad(M.loss_fn, has_aux=True), static_argnums=3)
    (loss, metrics), grads = fn(params, bias, batch, cfg)
    return loss, metrics, grads


@pytest.mark.parametrize("change", [dict(cross_entropy="blockwise"), dict(remat="full"),
                                    dict(remat="dots_saveable", cross_entropy="blockwise")])
def test_model_loss_and_gradients_do_not_depend_on_the_memory_levers(change):
    import jax
    CFG = small_config()

    loss_a, metrics_a, grads_a = _baseline()
    loss_b, metrics_b, grads_b = _loss_and_grads(dataclasses.replace(CFG, **change))
    np.testing.assert_allclose(loss_b, loss_a, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(metrics_b["expert_counts"], metrics_a["expert_counts"])
    for x, y in zip(jax.tree.leaves(grads_b), jax.tree.leaves(grads_a)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


def test_memory_lever_options_are_validated():
    CFG = small_config()

    with pytest.raises(ValueError, match="remat='some'"):
        dataclasses.replace(CFG, remat="some")
    with pytest.raises(ValueError, match="cross_entropy='fused'"):
        dataclasses.replace(CFG, cross_entropy="fused")
