"""Next-token cross-entropy straight from hidden states, never holding the [tokens, vocab] logits.

`blockwise_nll(h, w, targets, block)` walks the unembedding in vocabulary blocks of `block`
columns with an online logsumexp (forward) and recomputes each block's logits in the backward
pass (a custom VJP), so the largest live array is [tokens, block] instead of [tokens, vocab].
Equal to `naive_nll` (log_softmax over full logits) up to float32 summation order. With bfloat16
hidden states and weights the matmuls accumulate in float32 and the logits, log-sum-exp and NLL
are float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def naive_nll(h: jax.Array, w: jax.Array, targets: jax.Array) -> jax.Array:
    """h [N, d], w [d, V], targets [N] -> NLL [N] (nats, float32) through the full logits."""
    logits = jnp.dot(h, w, preferred_element_type=jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[:, None], axis=-1)[:, 0]


def _n_blocks(vocab: int, block: int) -> int:
    return -(-vocab // block)


def _block_logits(h, w, index, block):
    """float32 logits of block `index` and its first column. The last block is slid back to end
    at the vocabulary's end (no padded copy of w); columns it shares with the block before are
    masked to -inf so every column counts once."""
    vocab = w.shape[1]
    first = index * block
    start = jnp.minimum(first, vocab - block)
    cols = start + jnp.arange(block)
    logits = jnp.dot(h, jax.lax.dynamic_slice_in_dim(w, start, block, axis=1), preferred_element_type=jnp.float32)
    return jnp.where(cols[None, :] >= first, logits, -jnp.inf), cols, start


def _forward(h, w, targets, block):
    n, block = h.shape[0], min(block, w.shape[1])

    def body(carry, index):
        running_max, running_sum, target_logit = carry
        logits, cols, _ = _block_logits(h, w, index, block)
        new_max = jnp.maximum(running_max, jnp.max(logits, axis=-1))
        running_sum = running_sum * jnp.exp(running_max - new_max) + jnp.sum(jnp.exp(logits - new_max[:, None]), -1)
        hit = (cols[None, :] == targets[:, None]) & jnp.isfinite(logits)
        target_logit = target_logit + jnp.sum(jnp.where(hit, logits, 0.0), axis=-1)
        return (new_max, running_sum, target_logit), None

    init = (jnp.full((n,), -jnp.inf, jnp.float32), jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.float32))
    (running_max, running_sum, target_logit), _ = jax.lax.scan(body, init, jnp.arange(_n_blocks(w.shape[1], block)))
    lse = running_max + jnp.log(running_sum)
    return lse - target_logit, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def blockwise_nll(h: jax.Array, w: jax.Array, targets: jax.Array, block: int) -> jax.Array:
    """h [N, d], w [d, V], targets [N] -> NLL [N] (nats, float32), `block` vocab columns at a time."""
    return _forward(h, w, targets, block)[0]


def _fwd(h, w, targets, block):
    nll, lse = _forward(h, w, targets, block)
    return nll, (h, w, targets, lse)


def _bwd(block, residuals, g):
    h, w, targets, lse = residuals
    g, block = g.astype(jnp.float32), min(block, w.shape[1])

    def body(carry, index):
        dh, dw = carry
        logits, cols, start = _block_logits(h, w, index, block)
        # d nll / d logits = softmax - onehot(target), scaled by the incoming cotangent;
        # masked (already counted) columns get exp(-inf) = 0 and no target hit
        hit = (cols[None, :] == targets[:, None]) & jnp.isfinite(logits)
        dlogits = ((jnp.exp(logits - lse[:, None]) - hit) * g[:, None]).astype(h.dtype)
        wb = jax.lax.dynamic_slice_in_dim(w, start, block, axis=1)
        dw_block = (jax.lax.dynamic_slice_in_dim(dw, start, block, axis=1)
                    + jnp.dot(h.T, dlogits, preferred_element_type=jnp.float32))
        dw = jax.lax.dynamic_update_slice_in_dim(dw, dw_block, start, axis=1)
        return (dh + jnp.dot(dlogits, wb.T, preferred_element_type=jnp.float32), dw), None

    init = (jnp.zeros(h.shape, jnp.float32), jnp.zeros(w.shape, jnp.float32))
    (dh, dw), _ = jax.lax.scan(body, init, jnp.arange(_n_blocks(w.shape[1], block)))
    return dh.astype(h.dtype), dw.astype(w.dtype), None


blockwise_nll.defvjp(_fwd, _bwd)
