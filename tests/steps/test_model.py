"""The MoE model: shapes, the grouped (ragged_dot) experts against a per-expert loop, routing,
balancing losses and config validation."""

from __future__ import annotations

import dataclasses
import functools
import os

# Tiny models: XLA's expensive CPU optimisations cost far more compile time than they save.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                               " --xla_llvm_disable_expensive_passes=true").strip()

import numpy as np
import pytest


# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def small_config():
    from steps.train.config import ModelConfig

    return ModelConfig(vocab_size=50, seq_len=16, d_model=32, n_heads=4, n_layers=3, n_dense=1, d_ff=48,
                       n_experts=6, top_k=2, d_expert=16, n_shared=1)


@functools.cache
def jitted():
    """The model's init_params, forward and loss_fn under jax.jit, made once, on first use."""
    import jax
    from steps.train import model as M

    return (jax.jit(M.init_params, static_argnums=0), jax.jit(M.forward, static_argnums=(3, 4)),
            jax.jit(M.loss_fn, static_argnums=(3, 4)))


def reference_experts(w, x, indices, gates):
    """Plain loop: for each expert, run it on the tokens that picked it, add gate * output."""
    x, indices, gates = np.asarray(x, np.float64), np.asarray(indices), np.asarray(gates, np.float64)
    wg, wu, wd = (np.asarray(w[k], np.float64) for k in ("w_gate", "w_up", "w_down"))
    out = np.zeros_like(x)
    for e in range(wg.shape[0]):
        for t, slot in zip(*np.nonzero(indices == e)):
            h = x[t] @ wg[e]
            h = h / (1 + np.exp(-h)) * (x[t] @ wu[e])
            out[t] += gates[t, slot] * (h @ wd[e])
    return out


def test_forward_shapes_and_counts():
    import jax
    from steps.train import model as M
    CFG = small_config()
    init_params, forward, loss_fn = jitted()

    params = init_params(CFG, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (3, CFG.seq_len), 0, CFG.vocab_size)
    logits, stats = forward(params, M.init_router_bias(CFG), tokens, CFG)
    assert logits.shape == (3, CFG.seq_len, CFG.vocab_size)
    assert stats.counts.shape == (CFG.n_moe, CFG.n_experts)
    np.testing.assert_array_equal(stats.counts.sum(-1), [3 * CFG.seq_len * CFG.top_k] * CFG.n_moe)
    assert stats.aux_loss.shape == stats.z_loss.shape == (CFG.n_moe,)
    assert np.all(np.isfinite(np.asarray(logits)))


@pytest.mark.parametrize("affinity", ["sigmoid", "softmax"])
def test_ragged_and_dense_experts_equal_a_per_expert_loop(affinity):
    import jax
    import jax.numpy as jnp
    from steps.train import model as M
    CFG = small_config()
    init_params, forward, loss_fn = jitted()

    cfg = dataclasses.replace(CFG, router_affinity=affinity)
    moe = init_params(cfg, jax.random.key(2))["layers"][1]["moe"]
    x = jax.random.normal(jax.random.key(3), (40, cfg.d_model))
    bias = jnp.linspace(-0.1, 0.1, cfg.n_experts)
    r = jax.jit(M.route, static_argnums=3)(moe["router"], bias, x, cfg)
    expected = reference_experts(moe["experts"], x, r.indices, r.gates)
    for experts in (M.experts_ragged, M.experts_dense):
        got = jax.jit(experts)(moe["experts"], x, r.indices, r.gates)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # the selection really used the bias: an expert with a huge bias is always chosen
    forced = jax.jit(M.route, static_argnums=3)(moe["router"], bias.at[4].set(100.0), x, cfg)
    assert np.all(np.any(np.asarray(forced.indices) == 4, axis=1))


def test_ragged_and_dense_gradients_agree():
    """Gradients w.r.t. expert weights, router and inputs flow the same through both paths."""
    import jax
    import jax.numpy as jnp
    from steps.train import model as M
    CFG = small_config()
    init_params, forward, loss_fn = jitted()

    moe = init_params(CFG, jax.random.key(4))["layers"][1]["moe"]
    x = jax.random.normal(jax.random.key(5), (48, CFG.d_model))
    bias = jnp.zeros(CFG.n_experts)

    def objective(p, x, experts):
        return jnp.sum(M.moe_layer(p, bias, x, CFG, experts)[0] ** 2)
    grad = jax.jit(jax.grad(objective, argnums=(0, 1)), static_argnums=2)
    ragged, dense = grad(moe, x, M.experts_ragged), grad(moe, x, M.experts_dense)
    for a, b in zip(jax.tree.leaves(ragged), jax.tree.leaves(dense), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert float(jnp.abs(ragged[0]["router"]).sum()) > 0      # the gates carry router gradient


def test_balancing_terms():
    import jax
    import jax.numpy as jnp
    from steps.train import model as M
    CFG = small_config()
    init_params, forward, loss_fn = jitted()

    counts = jnp.array([[10.0, 2.0, 0.0, 5.0]])
    bias = M.router_bias_update(jnp.zeros((1, 4)), counts, 0.5)
    np.testing.assert_array_equal(bias, [[-0.5, 0.5, 0.5, -0.5]])   # mean load is 4.25
    np.testing.assert_allclose(M.load_imbalance(counts), [10 / 4.25])
    # the switch-style aux loss is 1.0 for perfectly uniform routing and larger when skewed
    cfg = dataclasses.replace(CFG, router_affinity="softmax", top_k=1, n_experts=4)
    x = jnp.ones((8, cfg.d_model))
    experts = init_params(cfg, jax.random.key(0))["layers"][1]["moe"]["experts"]
    layer = jax.jit(M.moe_layer, static_argnums=(3, 4))
    uniform = layer({"router": jnp.zeros((cfg.d_model, 4)), "experts": experts}, jnp.zeros(4), x, cfg, M.experts_ragged)[1]
    assert float(uniform.aux_loss) == pytest.approx(1.0)


def test_loss_with_aux_loss_mode_includes_it():
    import jax
    from steps.train import model as M
    CFG = small_config()
    init_params, forward, loss_fn = jitted()

    cfg = dataclasses.replace(CFG, balance="aux_loss", aux_loss_coef=0.5)
    params = init_params(cfg, jax.random.key(6))
    batch = jax.random.randint(jax.random.key(7), (2, cfg.seq_len + 1), 0, cfg.vocab_size)
    total, metrics = loss_fn(params, M.init_router_bias(cfg), batch, cfg)
    expected = metrics["loss"] + 0.5 * metrics["aux_loss"] + cfg.z_loss_coef * metrics["z_loss"]
    assert float(total) == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("kwargs, field", [
    (dict(n_experts=2, top_k=3), "top_k=3 exceeds n_experts=2"),
    (dict(d_model=30, n_heads=4), "d_model=30 is not divisible by n_heads=4"),
    (dict(n_dense=5, n_layers=3), "n_dense=5"),
    (dict(router_affinity="relu"), "router_affinity='relu'"),
    (dict(balance="magic"), "balance='magic'"),
])
def test_model_config_errors_name_the_field(kwargs, field):
    from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig

    with pytest.raises(ValueError, match="ModelConfig: " + field.replace("(", r"\(").replace(")", r"\)")):
        ModelConfig(**kwargs)


def test_train_and_optimizer_config_errors():
    from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig

    with pytest.raises(ValueError, match="schedule='linear'"):
        OptimizerConfig(schedule="linear")
    with pytest.raises(ValueError, match="batch_size=6 is not divisible by num_devices=4"):
        TrainConfig(cache_path="c", output_path="o", batch_size=6, num_devices=4)
    with pytest.raises(ValueError, match=r"n_experts=6 divisible by the expert axis \(4 devices"):
        TrainConfig(cache_path="c", output_path="o", batch_size=8, num_devices=4, expert_parallel=True,
                    model=ModelConfig(n_experts=6))
    with pytest.raises(ValueError, match="expert_axis_size=3 must divide num_devices=4"):
        TrainConfig(cache_path="c", output_path="o", num_devices=4, expert_parallel=True, expert_axis_size=3)
    with pytest.raises(ValueError, match="expert_axis_size=2 only applies with expert_parallel=True"):
        TrainConfig(cache_path="c", output_path="o", num_devices=4, expert_axis_size=2)


def _routing_imbalance(cfg, router_w, mu, steps, rate, aux_lr=0.0):
    """Route fresh skewed token batches; return mean max/mean load over the last half."""
    import jax
    import jax.numpy as jnp
    from steps.train import model as M

    route = jax.jit(M.route, static_argnums=3)

    def aux(w, bias, x):  # switch-style loss alone, to drive the router with its gradient
        r = M.route(w, bias, x, cfg)
        frac = M.expert_counts(r.indices, cfg.n_experts) / (x.shape[0] * cfg.top_k)
        return cfg.n_experts * jnp.sum(frac * jnp.mean(r.affinity / r.affinity.sum(-1, keepdims=True), 0))
    aux_grad = jax.jit(jax.grad(aux))
    bias = jnp.zeros(cfg.n_experts)
    loads = []
    for step in range(steps):
        x = jax.random.normal(jax.random.key(100 + step), (256, cfg.d_model)) + mu
        counts = M.expert_counts(route(router_w, bias, x, cfg).indices, cfg.n_experts)
        loads.append(float(M.load_imbalance(counts)))
        bias = M.router_bias_update(bias, counts, rate)
        if aux_lr:
            router_w = router_w - aux_lr * aux_grad(router_w, bias, x)
    return float(np.mean(loads[steps // 2:]))


@pytest.mark.parametrize("affinity", ["sigmoid", "softmax"])
def test_aux_free_bias_and_aux_loss_both_reduce_expert_load_imbalance(affinity):
    """Tokens share a strong common direction that the router favours for two experts: with no
    balancing those two take most of the load; the bias update and the aux loss each spread it."""
    import jax
    CFG = small_config()

    cfg = dataclasses.replace(CFG, router_affinity=affinity, n_experts=8, top_k=2)
    k1, k2 = jax.random.split(jax.random.key(9))
    mu = 1.5 * jax.random.normal(k1, (cfg.d_model,)) / np.sqrt(cfg.d_model)
    router_w = 0.3 * jax.random.normal(k2, (cfg.d_model, cfg.n_experts))
    router_w = router_w.at[:, :2].add(mu[:, None])
    unbalanced = _routing_imbalance(cfg, router_w, mu, 60, rate=0.0)
    bias_balanced = _routing_imbalance(cfg, router_w, mu, 60, rate=0.01)
    loss_balanced = _routing_imbalance(cfg, router_w, mu, 60, rate=0.0, aux_lr=1.0 if affinity == "sigmoid" else 3.0)
    assert unbalanced > 2.0, unbalanced
    assert bias_balanced < 0.6 * unbalanced, (bias_balanced, unbalanced)
    assert loss_balanced < 0.8 * unbalanced, (loss_balanced, unbalanced)
