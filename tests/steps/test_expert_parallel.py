"""Expert parallelism on 4 fake CPU devices, as one expert group of 4 and as a 2 (data) x 2
(expert) mesh: the all-gather and all-to-all dispatch layers equal the single-device grouped
layer in outputs and gradients (all-to-all with a capacity: equal to
the single-device layer with exactly the overflowing assignments dropped), training with
all-to-all dispatch (also on the 2 x 2 mesh with FSDP) equals one-device training, and the traffic formula of each scheme."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.steps.test_train import cache, compile_cache, run_python  # noqa: F401  (fixtures)

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def expected_kept(indices: np.ndarray, n_devices: int, n_local: int, capacity: int) -> np.ndarray:
    """The documented drop rule, written plainly: per source device, per destination device,
    the first `capacity` assignments in (token, slot) order are kept."""
    t_local = indices.shape[0] // n_devices
    kept = np.zeros(indices.shape, bool)
    for source in range(n_devices):
        used = [0] * n_devices
        for t in range(source * t_local, (source + 1) * t_local):
            for slot in range(indices.shape[1]):
                dest = indices[t, slot] // n_local
                kept[t, slot] = used[dest] < capacity
                used[dest] += 1
    return kept


def test_all_to_all_and_all_gather_layers_and_training_equal_single_device(cache, tmp_path, compile_cache):  # noqa: F811
    code = f"""
        import json, dataclasses, jax, jax.numpy as jnp, numpy as np
        from pathlib import Path
        from steps.train import train, model as M
        from steps.train.sharding import (expert_parallel_fn, expert_parallel_all_to_all_fn, make_mesh,
                                          capacity_per_destination)
        from tests.steps.test_train import tiny_config, load_model_export, tiny_model
        from tests.steps.test_expert_parallel import expected_kept
        n = len(jax.devices()); assert n == 4
        mesh = make_mesh(n, n)            # one expert group of 4 devices
        grid = make_mesh(n, 2)            # 2 data-parallel groups x 2 expert devices
        cfg = dataclasses.replace(tiny_model(), vocab_size=40, n_experts=8, top_k=2)
        moe = M.init_params(cfg, jax.random.key(0))["layers"][1]["moe"]
        x = jax.random.normal(jax.random.key(1), (64, cfg.d_model))
        # skewed routing, so that a capacity of 1.0 overflows on some destinations
        r = M.route(moe["router"], jnp.linspace(0.3, -0.3, cfg.n_experts), x, cfg)
        idx = np.asarray(r.indices)
        def value_and_grads(fn, gate_mask=None):
            # the layer's output and the gradients of sum(sin(output)), from one compiled program
            def f(w, x, g):
                out = fn(w, x, r.indices, g if gate_mask is None else g * gate_mask)
                return jnp.sum(jnp.sin(out)), out
            (_, out), grads = jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(moe["experts"], x, r.gates)
            return [np.asarray(out)] + [np.asarray(a) for a in jax.tree.leaves(grads)]
        diff = lambda a, b: max(float(np.max(np.abs(p - q))) for p, q in zip(a, b))
        reference = value_and_grads(M.experts_ragged)
        result = {{"all_gather": diff(value_and_grads(expert_parallel_fn(mesh)), reference),
                  "all_to_all": diff(value_and_grads(expert_parallel_all_to_all_fn(mesh, None)), reference),
                  "grid_all_gather": diff(value_and_grads(expert_parallel_fn(grid)), reference),
                  "grid_all_to_all": diff(value_and_grads(expert_parallel_all_to_all_fn(grid, None)), reference)}}
        capacity = capacity_per_destination(16 * cfg.top_k, n, 1.0)
        kept = expected_kept(idx, n, cfg.n_experts // n, capacity)
        result["dropped"] = int((~kept).sum())
        with_drops = value_and_grads(M.experts_ragged, jnp.asarray(kept, jnp.float32))
        with_capacity = value_and_grads(expert_parallel_all_to_all_fn(mesh, 1.0))
        result["all_to_all_capacity"] = diff(with_capacity, with_drops)
        result["capacity_vs_dropless"] = diff(with_capacity, reference)
        runs = {{}}
        for name, kw in [("one", dict(num_devices=1)),
                         ("a2a", dict(num_devices=4, expert_parallel=True, expert_dispatch="all_to_all")),
                         ("grid", dict(num_devices=4, expert_parallel=True, expert_dispatch="all_to_all",
                                       expert_axis_size=2, fsdp=True))]:
            out = Path({str(tmp_path)!r}) / name
            runs[name] = (train(tiny_config({cache!r}, out, num_steps=3, **kw))["final_loss"], load_model_export(out))
        result["train_params"] = diff(runs["one"][1], runs["a2a"][1])
        result["grid_train_params"] = diff(runs["one"][1], runs["grid"][1])
        result["train_losses"] = [runs["one"][0], runs["a2a"][0], runs["grid"][0]]
        print("RESULT", json.dumps(result))
        """
    proc = run_python(code, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", **compile_cache})
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    # float32: the layers differ from the reference only in summation order of the combine
    assert result["all_gather"] < 1e-4 and result["all_to_all"] < 1e-4, result
    assert result["grid_all_gather"] < 1e-4 and result["grid_all_to_all"] < 1e-4, result
    assert result["dropped"] > 0, result                      # the capacity case really drops
    assert result["all_to_all_capacity"] < 1e-4, result       # ... exactly the documented ones
    assert result["capacity_vs_dropless"] > 1e-2, result
    assert result["train_params"] < 1e-5 and result["grid_train_params"] < 1e-5, result
    assert result["train_losses"][0] == pytest.approx(result["train_losses"][1], rel=1e-5)
    assert result["train_losses"][0] == pytest.approx(result["train_losses"][2], rel=1e-5)


def test_capacity_and_traffic_formulas():
    from steps.train.sharding import capacity_per_destination, dispatch_bytes_per_layer

    assert capacity_per_destination(64, 8, None) == 64                   # dropless worst case
    assert capacity_per_destination(64, 8, 1.25) == 10                   # ceil(1.25 * 64 / 8)
    assert capacity_per_destination(64, 8, 100.0) == 64                  # never above dropless
    # 8 devices, 4,096 local tokens, top-2, d=4,096, float32, capacity 1.25
    gather = dispatch_bytes_per_layer("all_gather", 4096, 2, 4096, 8, 1.25)
    a2a = dispatch_bytes_per_layer("all_to_all", 4096, 2, 4096, 8, 1.25)
    assert gather == 2 * 7 * 4096 * 4096 * 4
    assert a2a == 2 * 7 * 1280 * 4096 * 4 and a2a / gather == pytest.approx(1280 / 4096)


def test_capacity_factor_needs_all_to_all_dispatch():
    from steps.train.config import TrainConfig

    with pytest.raises(ValueError, match="expert_capacity_factor=1.25 only applies"):
        TrainConfig(cache_path="c", output_path="o", expert_capacity_factor=1.25)
    with pytest.raises(ValueError, match="expert_dispatch='ring'"):
        TrainConfig(cache_path="c", output_path="o", expert_dispatch="ring")
