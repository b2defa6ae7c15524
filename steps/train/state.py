"""The train state (params, optimizer state, router bias, step) and one jittable train step.

State is a plain dict passed in and out. The router bias of aux-loss-free balancing lives here,
outside the gradients: the step nudges it by the sign of each expert's load error.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from steps.train.config import ModelConfig
from steps.train.model import ExpertFn, init_params, init_router_bias, load_imbalance, loss_fn, router_bias_update


def init_state(model_cfg: ModelConfig, optimizer: optax.GradientTransformation, seed: int) -> dict:
    params = jax.jit(init_params, static_argnums=0)(model_cfg, jax.random.key(seed))
    return {"params": params, "opt_state": jax.jit(optimizer.init)(params),
            "router_bias": init_router_bias(model_cfg), "step": jnp.zeros((), jnp.int32)}


def make_train_step(model_cfg: ModelConfig, optimizer: optax.GradientTransformation,
                    expert_fn: ExpertFn | None = None, compute_dtype: str = "float32"):
    """(state, batch [B, seq+1]) -> (state, metrics); pure, ready for jax.jit. The forward and
    backward passes compute in `compute_dtype`; params, gradients and optimizer state are float32."""

    def train_step(state: dict, batch: jax.Array) -> tuple[dict, dict]:
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (_, metrics), grads = grad_fn(state["params"], state["router_bias"], batch, model_cfg, expert_fn,
                                      compute_dtype)
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        bias = state["router_bias"]
        if model_cfg.balance == "aux_free" and model_cfg.n_moe:
            bias = router_bias_update(bias, metrics["expert_counts"], model_cfg.bias_update_rate)
        grad_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
        metrics = dict(metrics, grad_norm=grad_norm,
                       load_max_over_mean=load_imbalance(metrics["expert_counts"]))
        return {"params": params, "opt_state": opt_state, "router_bias": bias, "step": state["step"] + 1}, metrics

    return train_step
