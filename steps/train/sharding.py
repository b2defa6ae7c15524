"""The device mesh: a `data` axis and an `expert` axis, spanning every process of the step.

The mesh is (num_devices / e) x e devices, e = `expert_axis_size` (1 without expert
parallelism). Its rows are consecutive devices, so with e = devices per host the expert axis
stays inside a host and the data axis crosses hosts. The batch is split over both axes (every
device gets its own rows). Parameters are replicated, except:

- with expert parallelism, the routed experts' weights (and their optimizer moments) are split
  over the `expert` axis on their expert dimension: each expert group (one mesh row) holds every
  expert once, and the rows are data-parallel replicas of each other;
- with `fsdp`, every other parameter and optimizer moment is split over all devices (FSDP /
  ZeRO-3 style), and the experts' weights over the `data` axis too, on another dimension; XLA
  gathers a weight where a step needs it.

The same code trains on one host or many. The expert computation runs under `shard_map`, its
collectives over the `expert` axis only, with one of two dispatch schemes:

- `all_gather`: every device gathers its group's tokens' activations and routing decisions, runs
  its own experts over the tokens routed to them (sorted + ragged_dot, nothing dropped), and a
  reduce-scatter returns each device its own tokens' outputs. Traffic per device per layer:
  2 (n-1) T d values for T local tokens on an expert axis of n devices — it grows with n.
- `all_to_all` (see `all_to_all_dispatch`): each device sends each (token, expert) assignment
  only to the device owning that expert, into a fixed-capacity buffer, and the results come
  back the same way. Traffic: 2 (n-1)/n * n C d values, C = capacity per destination.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from steps.train.model import ExpertFn

DISPATCH_SCHEMES = ("all_gather", "all_to_all")

DATA, EXPERT = "data", "expert"
ALL = (DATA, EXPERT)   # split over every device of the mesh


def make_mesh(num_devices: int, expert_axis_size: int = 1) -> Mesh:
    devices = jax.devices()   # every process's devices, process by process
    if num_devices > len(devices):
        raise ValueError(f"num_devices={num_devices} but only {len(devices)} {devices[0].platform} device(s) "
                         f"are visible (on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    if jax.process_count() > 1 and num_devices != len(devices):
        raise ValueError(f"num_devices={num_devices}, but a multi-host run spans every device of its "
                         f"{jax.process_count()} processes: set num_devices={len(devices)}")
    if num_devices % expert_axis_size:
        raise ValueError(f"expert_axis_size={expert_axis_size} does not divide num_devices={num_devices}")
    grid = np.array(devices[:num_devices]).reshape(num_devices // expert_axis_size, expert_axis_size)
    return Mesh(grid, ALL)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(ALL))


def _is_expert_weight(path) -> bool:
    return any(getattr(k, "key", None) == "experts" for k in path)


def _split_largest(shape: tuple[int, ...], axes, n: int, skip: int | None = None) -> list:
    """A spec entry per dimension: `axes` on the largest dimension that n divides, None elsewhere."""
    dims = [d for d in range(len(shape)) if d != skip and shape[d] >= n and shape[d] % n == 0]
    spec = [None] * len(shape)
    if dims and n > 1:
        spec[max(dims, key=lambda d: shape[d])] = axes
    return spec


def state_shardings(state, mesh: Mesh, expert_parallel: bool, fsdp: bool = False):
    """Where each leaf of the train state lives (see the module docstring)."""
    def sharding(path, leaf):
        shape = tuple(leaf.shape)
        if expert_parallel and _is_expert_weight(path) and len(shape) == 3:
            spec = _split_largest(shape, DATA, mesh.shape[DATA], skip=0) if fsdp else [None] * 3
            return NamedSharding(mesh, P(EXPERT, *spec[1:]))
        if fsdp:
            return NamedSharding(mesh, P(*_split_largest(shape, ALL, mesh.size)))
        return NamedSharding(mesh, P())
    return jax.tree_util.tree_map_with_path(sharding, state)


def expert_parallel_fn(mesh: Mesh) -> ExpertFn:
    """An ExpertFn whose experts live sharded over the mesh axis (see the module docstring)."""

    def local_experts(w: dict, x: jax.Array, indices: jax.Array, gates: jax.Array) -> jax.Array:
        n_local = w["w_gate"].shape[0]
        x_all = jax.lax.all_gather(x, EXPERT, tiled=True)
        idx_all = jax.lax.all_gather(indices, EXPERT, tiled=True)
        gates_all = jax.lax.all_gather(gates, EXPERT, tiled=True)
        k = idx_all.shape[1]
        local = idx_all - jax.lax.axis_index(EXPERT) * n_local
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
        return jax.lax.psum_scatter(out_all, EXPERT, scatter_dimension=0, tiled=True)

    return _expert_shard_map(local_experts, mesh)


def _expert_shard_map(body, mesh: Mesh):
    """Run `body(w, x, indices, gates)` per device: experts split over EXPERT, tokens over ALL."""
    experts, tokens = P(EXPERT), P(ALL)
    return jax.shard_map(body, mesh=mesh, in_specs=({"w_gate": experts, "w_up": experts, "w_down": experts},
                                                    tokens, tokens, tokens), out_specs=tokens)


def capacity_per_destination(local_assignments: int, n_devices: int, capacity_factor: float | None) -> int:
    """Buffer rows each device reserves for each destination device.

    None: `local_assignments` (every assignment of this device could go to one destination):
    nothing is ever dropped, and results equal the single-device layer. A factor f reserves
    ceil(f * local_assignments / n_devices) rows (f = 1 is a perfectly even spread); assignments
    past a destination's capacity are dropped (in source order), as in GShard/Switch: their
    routed contribution is zero and the token still flows through the residual and shared experts.
    """
    if capacity_factor is None:
        return local_assignments
    return max(1, min(local_assignments, int(np.ceil(capacity_factor * local_assignments / n_devices))))


def all_to_all_dispatch(w: dict, x: jax.Array, indices: jax.Array, gates: jax.Array, n: int,
                        capacity_factor: float | None) -> tuple[jax.Array, jax.Array]:
    """The per-device body (inside shard_map) of all-to-all expert parallelism.

    x [T, d] local tokens, indices/gates [T, k] their routing, w the local experts [E_loc, ...].
    n is the size of the EXPERT axis, over which the tokens move. Returns (out [T, d], dropped assignments on this device)."""
    n_local = w["w_gate"].shape[0]
    t, k = indices.shape
    d = x.shape[-1]
    flat_expert = indices.reshape(-1)
    token_of = jnp.arange(t * k) // k
    dest = flat_expert // n_local
    capacity = capacity_per_destination(t * k, n, capacity_factor)
    # rank of each assignment among this device's assignments to the same destination
    position = jnp.take_along_axis(jnp.cumsum(jax.nn.one_hot(dest, n, dtype=jnp.int32), axis=0) - 1,
                                   dest[:, None], axis=1)[:, 0]
    kept = position < capacity
    slot = jnp.where(kept, dest * capacity + position, n * capacity)    # overflow -> a spare row
    send_x = jnp.zeros((n * capacity + 1, d), x.dtype).at[slot].set(x[token_of])[:-1]
    send_e = jnp.full((n * capacity + 1,), -1, jnp.int32).at[slot].set(flat_expert - dest * n_local)[:-1]
    # row block j goes to device j; afterwards block j holds what device j sent here
    recv_x = jax.lax.all_to_all(send_x.reshape(n, capacity, d), EXPERT, 0, 0, tiled=True).reshape(n * capacity, d)
    recv_e = jax.lax.all_to_all(send_e.reshape(n, capacity), EXPERT, 0, 0, tiled=True).reshape(-1)
    # grouped SwiGLU over the local experts; empty rows (-1) sort last and are not computed
    group = jnp.where(recv_e >= 0, recv_e, n_local)
    order = jnp.argsort(group, stable=True)
    sizes = jnp.bincount(group, length=n_local + 1)[:n_local].astype(jnp.int32)
    xs = recv_x[order]
    hidden = jax.nn.silu(jax.lax.ragged_dot(xs, w["w_gate"], sizes)) * jax.lax.ragged_dot(xs, w["w_up"], sizes)
    ys = jnp.zeros_like(recv_x).at[order].set(jax.lax.ragged_dot(hidden, w["w_down"], sizes))
    back = jax.lax.all_to_all(ys.reshape(n, capacity, d), EXPERT, 0, 0, tiled=True).reshape(n * capacity, d)
    back = jnp.concatenate([back, jnp.zeros((1, d), back.dtype)])      # the spare row: dropped -> 0
    contribution = back[slot] * jnp.where(kept, gates.reshape(-1), 0)[:, None]
    out = jnp.zeros_like(x).at[token_of].add(contribution)
    return out, jnp.sum(~kept)


def expert_parallel_all_to_all_fn(mesh: Mesh, capacity_factor: float | None) -> ExpertFn:
    """An ExpertFn whose experts live sharded over the expert axis, fed by all-to-all dispatch."""
    def body(w, x, indices, gates):
        return all_to_all_dispatch(w, x, indices, gates, mesh.shape[EXPERT], capacity_factor)[0]

    return _expert_shard_map(body, mesh)


def dispatch_bytes_per_layer(scheme: str, tokens_per_device: int, top_k: int, d_model: int, n_devices: int,
                             capacity_factor: float | None, bytes_per_value: int = 4) -> int:
    """Bytes one device sends (= receives) per MoE layer, forward pass, under each scheme
    (the backward pass moves the same amount again). Routing ids and gates are not counted."""
    n, t = n_devices, tokens_per_device
    if scheme == "all_gather":   # all-gather of x + reduce-scatter of the outputs
        return 2 * (n - 1) * t * d_model * bytes_per_value
    capacity = capacity_per_destination(t * top_k, n, capacity_factor)
    return 2 * (n - 1) * capacity * d_model * bytes_per_value   # dispatch + combine, own block stays
