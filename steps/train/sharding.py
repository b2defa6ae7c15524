"""Device mesh for data parallelism and (optionally) expert parallelism over the same axis.

The batch is split over the mesh axis `data` (NamedSharding); parameters are replicated,
except, with expert parallelism, the routed experts' weights (and their optimizer moments),
whose expert dimension is split over the same axis. The expert computation then runs under
`shard_map`: every device gathers all tokens' activations and routing decisions, runs its own
experts over the tokens routed to them (sorted + ragged_dot, nothing dropped), and a
reduce-scatter returns each device its own tokens' outputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from steps.train.model import ExpertFn

AXIS = "data"


def make_mesh(num_devices: int) -> Mesh:
    devices = jax.devices()
    if num_devices > len(devices):
        raise ValueError(f"num_devices={num_devices} but only {len(devices)} {devices[0].platform} device(s) "
                         f"are visible (on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    return Mesh(np.array(devices[:num_devices]), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXIS))


def _is_expert_weight(path) -> bool:
    return any(getattr(k, "key", None) == "experts" for k in path)


def state_shardings(state, mesh: Mesh, expert_parallel: bool):
    """Replicated everywhere, except expert weights split on their expert dim under EP."""
    def sharding(path, leaf):
        if expert_parallel and _is_expert_weight(path) and getattr(leaf, "ndim", 0) == 3:
            return NamedSharding(mesh, P(AXIS))
        return NamedSharding(mesh, P())
    return jax.tree_util.tree_map_with_path(sharding, state)


def expert_parallel_fn(mesh: Mesh) -> ExpertFn:
    """An ExpertFn whose experts live sharded over the mesh axis (see the module docstring)."""

    def local_experts(w: dict, x: jax.Array, indices: jax.Array, gates: jax.Array) -> jax.Array:
        n_local = w["w_gate"].shape[0]
        x_all = jax.lax.all_gather(x, AXIS, tiled=True)
        idx_all = jax.lax.all_gather(indices, AXIS, tiled=True)
        gates_all = jax.lax.all_gather(gates, AXIS, tiled=True)
        k = idx_all.shape[1]
        local = idx_all - jax.lax.axis_index(AXIS) * n_local
        mine = (local >= 0) & (local < n_local)
        group = jnp.where(mine, local, n_local).reshape(-1)   # other devices' assignments last
        order = jnp.argsort(group, stable=True)
        token_of = order // k
        sizes = jnp.bincount(group, length=n_local + 1)[:n_local].astype(jnp.int32)
        xs = x_all[token_of]
        hidden = jax.nn.silu(jax.lax.ragged_dot(xs, w["w_gate"], sizes)) * jax.lax.ragged_dot(xs, w["w_up"], sizes)
        weight = jnp.where(mine, gates_all, 0).reshape(-1)[order]
        ys = jax.lax.ragged_dot(hidden, w["w_down"], sizes) * weight[:, None]
        out_all = jnp.zeros_like(x_all).at[token_of].add(ys)
        return jax.lax.psum_scatter(out_all, AXIS, scatter_dimension=0, tiled=True)

    spec = P(AXIS)
    return jax.shard_map(local_experts, mesh=mesh, in_specs=({"w_gate": spec, "w_up": spec, "w_down": spec},
                                                             spec, spec, spec), out_specs=spec)
