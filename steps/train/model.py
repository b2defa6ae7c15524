"""A DeepSeek-style MoE decoder as pure functions over a params pytree (no hidden state).

Token embedding -> [RMSNorm -> RoPE causal attention -> RMSNorm -> SwiGLU or MoE] x n_layers
-> RMSNorm -> unembedding. The first `n_dense` layers use a dense SwiGLU; the rest route each
token to `top_k` of `n_experts` SwiGLU experts (plus always-on shared experts). Routed experts
run grouped: assignments are sorted by expert and multiplied with `jax.lax.ragged_dot`, so no
token is dropped. The router bias used by auxiliary-loss-free balancing is an input, kept in the
train state outside the gradients; `router_bias_update` is its sign update.

Mixed precision (`compute_dtype="bfloat16"`): parameters stay float32 and are cast to the compute
dtype where they are used (`cast_for_compute`), so matmuls and activations run in bfloat16 and the
gradients come back float32. RMSNorm statistics, attention's softmax, the router (its weights,
logits, affinities and balancing statistics) and the cross-entropy (logits, log-sum-exp, loss)
stay float32.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from steps.train.config import ModelConfig
from steps.train.cross_entropy import blockwise_nll, naive_nll

Params = dict
ExpertFn = Callable[[dict, jax.Array, jax.Array, jax.Array], jax.Array]


# ---------------------------------------------------------------------------- initialisation

def param_shapes(cfg: ModelConfig) -> Params:
    """The params pytree with (shape, init std) tuples as leaves; std 0 means ones (norms)."""
    if cfg.vocab_size is None:
        raise ValueError("ModelConfig.vocab_size is None; fill it in from the token cache first")
    d, std = cfg.d_model, cfg.init_std
    out_std = std / math.sqrt(2 * cfg.n_layers)

    def swiglu_shapes(d_hidden: int, lead: tuple[int, ...] = ()) -> dict:
        return {"w_gate": (lead + (d, d_hidden), std), "w_up": (lead + (d, d_hidden), std),
                "w_down": (lead + (d_hidden, d), out_std)}

    layers = []
    for i in range(cfg.n_layers):
        layer = {"attn_norm": ((d,), 0.0), "wq": ((d, d), std), "wk": ((d, d), std), "wv": ((d, d), std),
                 "wo": ((d, d), out_std), "mlp_norm": ((d,), 0.0)}
        if i < cfg.n_dense:
            layer["mlp"] = swiglu_shapes(cfg.d_ff)
        else:
            layer["moe"] = {"router": ((d, cfg.n_experts), std),
                            "experts": swiglu_shapes(cfg.d_expert, (cfg.n_experts,))}
            if cfg.n_shared:
                layer["moe"]["shared"] = swiglu_shapes(cfg.d_expert * cfg.n_shared)
        layers.append(layer)
    return {"embed": ((cfg.vocab_size, d), std), "layers": layers, "final_norm": ((d,), 0.0),
            "unembed": ((d, cfg.vocab_size), std)}


def init_params(cfg: ModelConfig, key: jax.Array) -> Params:
    """Normal(0, std) weights, ones for norms. One random draw for everything: a single
    threefry computation compiles in a blink, where one per leaf takes a minute on a CPU."""
    spec = param_shapes(cfg)
    is_spec = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)  # noqa: E731
    leaves, treedef = jax.tree_util.tree_flatten(spec, is_leaf=is_spec)
    sizes = [math.prod(shape) for shape, _ in leaves]
    noise = jax.random.normal(key, (sum(sizes),), jnp.float32)
    out, offset = [], 0
    for (shape, std), size in zip(leaves, sizes):
        chunk = noise[offset:offset + size].reshape(shape)
        out.append(std * chunk if std else jnp.ones(shape, jnp.float32))
        offset += size
    return jax.tree_util.tree_unflatten(treedef, out)


def init_router_bias(cfg: ModelConfig) -> jax.Array:
    """One bias per (MoE layer, expert); used for expert selection only, never for gating."""
    return jnp.zeros((cfg.n_moe, cfg.n_experts), jnp.float32)


# ---------------------------------------------------------------------------- building blocks

COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
_FLOAT32_PARAMS = ("router",)  # the router runs in float32 whatever the compute dtype


def cast_for_compute(params: Params, compute_dtype: str) -> Params:
    """The params as the forward pass uses them: matrices in the compute dtype; norm weights
    (vectors) and the router stay float32. Casting is differentiable: gradients come back float32."""
    dtype = COMPUTE_DTYPES[compute_dtype]
    if dtype == jnp.float32:
        return params

    def cast(path, leaf):
        keys = {getattr(k, "key", None) for k in path}
        return leaf if leaf.ndim < 2 or keys & set(_FLOAT32_PARAMS) else leaf.astype(dtype)
    return jax.tree_util.tree_map_with_path(cast, params)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Normalised in float32, returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps) * weight).astype(x.dtype)


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    angles = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x: [batch, seq, heads, head_dim]; rotates the two halves of each head (NeoX layout)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1).astype(x.dtype)


def attention_implementation(choice: str, dtype) -> str:
    """`auto`: cuDNN's fused kernel on a GPU for 16-bit inputs (the only ones it takes), else XLA."""
    if choice != "auto":
        return choice
    fused_ok = jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return "cudnn" if fused_ok else "xla"


def causal_attention(p: dict, x: jax.Array, cfg: ModelConfig, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Causal self-attention through `jax.nn.dot_product_attention` (softmax in float32 in both
    implementations), heads laid out [batch, seq, heads, head_dim] as it expects."""
    b, t, d = x.shape
    h, hd = cfg.n_heads, cfg.head_dim
    q = apply_rope((x @ p["wq"]).reshape(b, t, h, hd), cos, sin)
    k = apply_rope((x @ p["wk"]).reshape(b, t, h, hd), cos, sin)
    v = (x @ p["wv"]).reshape(b, t, h, hd)
    out = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                       implementation=attention_implementation(cfg.attention, x.dtype))
    return out.reshape(b, t, d) @ p["wo"]


def swiglu(p: dict, x: jax.Array) -> jax.Array:
    return (jax.nn.silu(x @ p["w_gate"]) * (x @ p["w_up"])) @ p["w_down"]


# ---------------------------------------------------------------------------- routing

class Routing(NamedTuple):
    indices: jax.Array    # [tokens, top_k] chosen experts
    gates: jax.Array      # [tokens, top_k] combine weights (from affinities, without bias)
    logits: jax.Array     # [tokens, n_experts]
    affinity: jax.Array   # [tokens, n_experts]


def route(router_w: jax.Array, bias: jax.Array, x: jax.Array, cfg: ModelConfig) -> Routing:
    logits = x.astype(jnp.float32) @ router_w.astype(jnp.float32)
    if cfg.router_affinity == "sigmoid":
        affinity = jax.nn.sigmoid(logits)
    else:
        affinity = jax.nn.softmax(logits, axis=-1)
    selection = affinity + jax.lax.stop_gradient(bias)[None, :]
    _, indices = jax.lax.top_k(selection, cfg.top_k)
    gates = jnp.take_along_axis(affinity, indices, axis=-1)
    if cfg.router_affinity == "sigmoid":  # DeepSeek-V3: normalise the selected sigmoid scores
        gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
    return Routing(indices, gates, logits, affinity)


def expert_counts(indices: jax.Array, n_experts: int) -> jax.Array:
    """Number of (token, slot) assignments per expert, as float32 [n_experts]."""
    return jnp.bincount(indices.reshape(-1), length=n_experts).astype(jnp.float32)


# ---------------------------------------------------------------------------- experts

def experts_ragged(w: dict, x: jax.Array, indices: jax.Array, gates: jax.Array) -> jax.Array:
    """Grouped expert SwiGLU: sort (token, slot) pairs by expert, ragged_dot per group."""
    n_experts = w["w_gate"].shape[0]
    k = indices.shape[1]
    flat = indices.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    token_of = order // k
    sizes = jnp.bincount(flat, length=n_experts).astype(jnp.int32)
    xs = x[token_of]
    hidden = jax.nn.silu(jax.lax.ragged_dot(xs, w["w_gate"], sizes)) * jax.lax.ragged_dot(xs, w["w_up"], sizes)
    ys = jax.lax.ragged_dot(hidden, w["w_down"], sizes) * gates.reshape(-1)[order][:, None]
    return jnp.zeros_like(x).at[token_of].add(ys)


def experts_dense(w: dict, x: jax.Array, indices: jax.Array, gates: jax.Array) -> jax.Array:
    """Control: every expert on every token, then a dense combine (E times the FLOPs)."""
    n_experts = w["w_gate"].shape[0]
    hidden = jax.nn.silu(jnp.einsum("nd,edf->enf", x, w["w_gate"])) * jnp.einsum("nd,edf->enf", x, w["w_up"])
    ys = jnp.einsum("enf,efd->end", hidden, w["w_down"])
    combine = jnp.zeros((x.shape[0], n_experts), x.dtype)
    combine = combine.at[jnp.arange(x.shape[0])[:, None], indices].add(gates.astype(x.dtype))
    return jnp.einsum("end,ne->nd", ys, combine)


def default_expert_fn(cfg: ModelConfig) -> ExpertFn:
    return experts_ragged if cfg.expert_impl == "ragged" else experts_dense


class MoEStats(NamedTuple):
    counts: jax.Array     # [n_experts] assignments per expert
    aux_loss: jax.Array   # switch-style balance loss (before its coefficient)
    z_loss: jax.Array     # router z-loss (before its coefficient)


def moe_layer(p: dict, bias: jax.Array, x: jax.Array, cfg: ModelConfig,
              expert_fn: ExpertFn) -> tuple[jax.Array, MoEStats]:
    """x: [tokens, d_model] -> routed experts + shared experts, and the layer's router stats."""
    r = route(p["router"], bias, x, cfg)
    out = expert_fn(p["experts"], x, r.indices, r.gates.astype(x.dtype))
    if "shared" in p:
        out = out + swiglu(p["shared"], x)
    counts = expert_counts(r.indices, cfg.n_experts)
    fraction = counts / (x.shape[0] * cfg.top_k)
    mean_prob = jnp.mean(r.affinity / jnp.sum(r.affinity, axis=-1, keepdims=True), axis=0)
    aux = cfg.n_experts * jnp.sum(jax.lax.stop_gradient(fraction) * mean_prob)
    z = jnp.mean(jax.nn.logsumexp(r.logits, axis=-1) ** 2)
    return out, MoEStats(counts, aux, z)


# ---------------------------------------------------------------------------- the model

REMAT_POLICY = {"full": None, "dots_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def _layer_fn(cfg: ModelConfig, expert_fn: ExpertFn, dense: bool):
    """One decoder layer (layer, bias, x, cos, sin) -> (x, stats), rematerialised per `cfg.remat`:
    `full` keeps only the layer's input for the backward pass, `dots_saveable` also keeps the
    outputs of weight matmuls (dots without batch dims) and recomputes the rest."""

    def layer_fn(layer: dict, bias: jax.Array, x: jax.Array, cos: jax.Array, sin: jax.Array):
        b, t, _ = x.shape
        x = x + causal_attention(layer, rms_norm(x, layer["attn_norm"]), cfg, cos, sin)
        h = rms_norm(x, layer["mlp_norm"])
        if dense:
            return x + swiglu(layer["mlp"], h), None
        out, stats = moe_layer(layer["moe"], bias, h.reshape(b * t, -1), cfg, expert_fn)
        return x + out.reshape(b, t, -1), stats

    if cfg.remat == "none":
        return layer_fn
    return jax.checkpoint(layer_fn, policy=REMAT_POLICY[cfg.remat])


def hidden_states(params: Params, router_bias: jax.Array, tokens: jax.Array, cfg: ModelConfig,
                  expert_fn: ExpertFn | None = None) -> tuple[jax.Array, MoEStats]:
    """tokens [batch, seq] -> final-normed hidden states [batch, seq, d_model] and MoE stats
    stacked over MoE layers."""
    expert_fn = expert_fn or default_expert_fn(cfg)
    _, t = tokens.shape
    cos, sin = rope_tables(t, cfg.head_dim, cfg.rope_theta)
    x = jnp.take(params["embed"], tokens, axis=0)
    dense_fn, moe_fn = _layer_fn(cfg, expert_fn, True), _layer_fn(cfg, expert_fn, False)
    no_bias = jnp.zeros((cfg.n_experts,), jnp.float32)
    stats = []
    for i, layer in enumerate(params["layers"]):
        if "mlp" in layer:
            x, _ = dense_fn(layer, no_bias, x, cos, sin)
        else:
            x, s = moe_fn(layer, router_bias[i - cfg.n_dense], x, cos, sin)
            stats.append(s)
    if stats:
        stacked = MoEStats(*(jnp.stack(field) for field in zip(*stats)))
    else:
        zero = jnp.zeros((0,), jnp.float32)
        stacked = MoEStats(jnp.zeros((0, cfg.n_experts)), zero, zero)
    return rms_norm(x, params["final_norm"]), stacked


def forward(params: Params, router_bias: jax.Array, tokens: jax.Array, cfg: ModelConfig,
            expert_fn: ExpertFn | None = None) -> tuple[jax.Array, MoEStats]:
    """tokens [batch, seq] -> logits [batch, seq, vocab] and MoE stats stacked over MoE layers."""
    h, stats = hidden_states(params, router_bias, tokens, cfg, expert_fn)
    return h @ params["unembed"], stats


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Negative log-likelihood (nats) of each target token, in float32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def sequence_nll(params: Params, router_bias: jax.Array, inputs: jax.Array, targets: jax.Array,
                 cfg: ModelConfig, expert_fn: ExpertFn | None = None) -> tuple[jax.Array, MoEStats]:
    """inputs, targets [B, T] -> NLL [B, T] of each target token, through `cfg.cross_entropy`."""
    h, stats = hidden_states(params, router_bias, inputs, cfg, expert_fn)
    b, t, d = h.shape
    flat_h, flat_targets = h.reshape(b * t, d), targets.reshape(b * t)
    if cfg.cross_entropy == "blockwise":
        nll = blockwise_nll(flat_h, params["unembed"], flat_targets, min(cfg.ce_block_size, cfg.vocab_size))
    else:
        nll = naive_nll(flat_h, params["unembed"], flat_targets)
    return nll.reshape(b, t), stats


def loss_fn(params: Params, router_bias: jax.Array, batch: jax.Array, cfg: ModelConfig,
            expert_fn: ExpertFn | None = None, compute_dtype: str = "float32") -> tuple[jax.Array, dict]:
    """batch [B, seq+1]: next-token cross-entropy plus the selected balancing/z losses (float32),
    the forward pass computed in `compute_dtype` from float32 `params`."""
    params = cast_for_compute(params, compute_dtype)
    nll, stats = sequence_nll(params, router_bias, batch[:, :-1], batch[:, 1:], cfg, expert_fn)
    ce = jnp.mean(nll)
    aux = jnp.sum(stats.aux_loss)
    z = jnp.sum(stats.z_loss)
    total = ce + cfg.z_loss_coef * z
    if cfg.balance == "aux_loss":
        total = total + cfg.aux_loss_coef * aux
    return total, {"loss": ce, "aux_loss": aux, "z_loss": z, "expert_counts": stats.counts}


def router_bias_update(bias: jax.Array, counts: jax.Array, rate: float) -> jax.Array:
    """Aux-loss-free balancing: raise the bias of under-loaded experts, lower over-loaded ones."""
    error = jnp.mean(counts, axis=-1, keepdims=True) - counts
    return bias + rate * jnp.sign(error)


def load_imbalance(counts: jax.Array) -> jax.Array:
    """max/mean expert load per MoE layer (1.0 is perfect balance)."""
    return jnp.max(counts, axis=-1) / jnp.maximum(jnp.mean(counts, axis=-1), 1e-9)
