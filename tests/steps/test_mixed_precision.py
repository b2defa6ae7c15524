"""Attention through jax.nn.dot_product_attention equals the hand-written causal attention it
replaced, and bfloat16 compute keeps parameters, gradients, the router and the loss float32."""

from __future__ import annotations

import dataclasses
import math
import os

# Tiny models: XLA's expensive CPU optimisations cost far more compile time than they save.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                               " --xla_llvm_disable_expensive_passes=true").strip()

import numpy as np  # noqa: E402
import pytest  # noqa: E402


# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def small_config():
    from steps.train.config import ModelConfig

    return ModelConfig(vocab_size=50, seq_len=16, d_model=32, n_heads=4, n_layers=3, n_dense=1, d_ff=48,
                       n_experts=6, top_k=2, d_expert=16, n_shared=1)


def handwritten_attention(p: dict, x, cfg, cos, sin):
    """The implementation the trainer used before dot_product_attention: explicit scores, a
    causal mask of finfo.min, softmax, weighted values."""
    import jax
    import jax.numpy as jnp
    from steps.train import model as M

    b, t, d = x.shape
    h, hd = cfg.n_heads, cfg.head_dim
    q = M.apply_rope((x @ p["wq"]).reshape(b, t, h, hd), cos, sin)
    k = M.apply_rope((x @ p["wk"]).reshape(b, t, h, hd), cos, sin)
    v = (x @ p["wv"]).reshape(b, t, h, hd)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, jnp.finfo(scores.dtype).min)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(b, t, d) @ p["wo"]


def _layer_and_input():
    import jax
    from steps.train import model as M
    CFG = small_config()

    layer = M.init_params(CFG, jax.random.key(0))["layers"][0]
    x = jax.random.normal(jax.random.key(1), (2, CFG.seq_len, CFG.d_model))
    return layer, x, M.rope_tables(CFG.seq_len, CFG.head_dim, CFG.rope_theta)


@pytest.mark.parametrize("implementation", ["auto", "xla"])
def test_attention_equals_the_handwritten_causal_attention(implementation):
    import jax
    import jax.numpy as jnp
    from steps.train import model as M
    CFG = small_config()

    layer, x, (cos, sin) = _layer_and_input()
    cfg = dataclasses.replace(CFG, attention=implementation)
    fused = lambda p, x: jnp.sum(jnp.sin(M.causal_attention(p, x, cfg, cos, sin)))  # noqa: E731
    manual = lambda p, x: jnp.sum(jnp.sin(handwritten_attention(p, x, cfg, cos, sin)))  # noqa: E731
    np.testing.assert_allclose(M.causal_attention(layer, x, cfg, cos, sin), handwritten_attention(layer, x, cfg, cos, sin),
                               rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(jax.grad(fused, argnums=(0, 1))(layer, x)),
                    jax.tree.leaves(jax.grad(manual, argnums=(0, 1))(layer, x)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_attention_is_causal():
    """A change to a later token leaves every earlier position's output unchanged."""
    from steps.train import model as M
    CFG = small_config()

    layer, x, (cos, sin) = _layer_and_input()
    changed = x.at[:, 10:].add(1.0)
    a, b = M.causal_attention(layer, x, CFG, cos, sin), M.causal_attention(layer, changed, CFG, cos, sin)
    np.testing.assert_array_equal(a[:, :10], b[:, :10])
    assert not np.allclose(a[:, 10:], b[:, 10:])


def test_attention_implementation_is_chosen_by_backend_and_dtype():
    import jax
    import jax.numpy as jnp
    from steps.train import model as M
    from steps.train.config import ModelConfig

    assert M.attention_implementation("xla", jnp.bfloat16) == "xla"
    assert M.attention_implementation("cudnn", jnp.float32) == "cudnn"
    expected = "cudnn" if jax.default_backend() == "gpu" else "xla"
    assert M.attention_implementation("auto", jnp.bfloat16) == expected
    assert M.attention_implementation("auto", jnp.float32) == "xla"   # cuDNN's kernel takes 16-bit inputs only
    with pytest.raises(ValueError, match="attention='flash'"):
        ModelConfig(attention="flash")


def test_bfloat16_compute_keeps_params_gradients_router_and_loss_float32():
    import jax
    import jax.numpy as jnp
    from steps.train import model as M
    CFG = small_config()

    params = M.init_params(CFG, jax.random.key(0))
    bias = M.init_router_bias(CFG)
    batch = jax.random.randint(jax.random.key(2), (4, CFG.seq_len + 1), 0, CFG.vocab_size)
    cast = M.cast_for_compute(params, "bfloat16")
    for path, leaf in jax.tree_util.tree_leaves_with_path(cast):
        keys = [getattr(k, "key", None) for k in path]
        wanted = jnp.float32 if leaf.ndim < 2 or "router" in keys else jnp.bfloat16
        assert leaf.dtype == wanted, (keys, leaf.dtype)
    assert M.cast_for_compute(params, "float32") is params

    seen = {}
    real_route = M.route

    def spy_route(router_w, bias, x, cfg):
        routing = real_route(router_w, bias, x, cfg)
        seen.update(x=x.dtype, logits=routing.logits.dtype, affinity=routing.affinity.dtype)
        return routing

    # jitted (one compile per dtype, not one per operation): the spy sees the traced dtypes, the
    # same ones an eager run has, and the jitted train step is what training runs
    grad_fn = jax.jit(jax.value_and_grad(M.loss_fn, has_aux=True), static_argnums=(3, 4, 5))
    M.route = spy_route
    try:
        (total, metrics), grads = grad_fn(params, bias, batch, CFG, None, "bfloat16")
    finally:
        M.route = real_route
    assert seen == {"x": jnp.bfloat16, "logits": jnp.float32, "affinity": jnp.float32}
    assert total.dtype == jnp.float32 and metrics["loss"].dtype == jnp.float32
    assert metrics["aux_loss"].dtype == jnp.float32 and metrics["z_loss"].dtype == jnp.float32
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads))
    (total32, _), grads32 = grad_fn(params, bias, batch, CFG, None, "float32")
    assert abs(float(total) - float(total32)) < 2e-2 * float(total32)   # the same loss, computed in bf16
    cos_sim = [float(jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b) + 1e-30))
               for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grads32)) if float(jnp.linalg.norm(b)) > 0]
    assert min(cos_sim) > 0.98, cos_sim
