"""The train step: deterministic batches, checkpoints (atomic, torn ones skipped), loss going
down, exact resume after a SIGKILL, and sharded (2 fake CPU devices) == unsharded training."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from steps.token_cache import TokenSplit

REPO = Path(__file__).resolve().parents[2]

# JAX (and steps.train, which imports it) is imported inside the tests, never when this module is
# collected: an xdist worker that has imported JAX spawns every inline-runner step of every later
# test instead of forking it (executor/engine/runner/inline.py fork_is_unsafe; issue 46). The
# `jax` marker (pyproject) orders this file after the files that do not import JAX.
pytestmark = pytest.mark.jax

# Tiny models: XLA's expensive CPU optimisations cost far more compile time than they save.
# Set before any computation, so this process and its subprocesses compile alike.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                               " --xla_llvm_disable_expensive_passes=true").strip()


def tiny_model():
    from steps.train import ModelConfig

    return ModelConfig(seq_len=32, d_model=32, n_heads=2, n_layers=2, n_dense=1, d_ff=64,
                       n_experts=4, top_k=2, d_expert=16, n_shared=1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    from steps.train.synthetic import write_synthetic_cache

    return str(write_synthetic_cache(tmp_path_factory.mktemp("cache") / "tokens", n_train=300, n_validation=30))


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory) -> dict:
    """A persistent JAX compilation cache shared by the session's training subprocesses (the same
    tiny programs): one directory for every module that imports this fixture, not one each."""
    directory = tmp_path_factory.getbasetemp() / "jax-cache"
    directory.mkdir(exist_ok=True)
    return {"JAX_COMPILATION_CACHE_DIR": str(directory), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def tiny_config(cache: str, out: Path, **overrides):
    from steps.train import OptimizerConfig, TrainConfig

    base = dict(model=tiny_model(), optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=3),
                batch_size=8, num_steps=12, checkpoint_every=4, keep_checkpoints=5, log_every=1)
    return TrainConfig(cache_path=cache, output_path=str(out), **{**base, **overrides})


def load_model_export(out: Path) -> list[np.ndarray]:
    from steps.train.loop import MODEL_SUBDIR

    fs_dir = out / MODEL_SUBDIR
    step = max(int(p.name.split("-")[1]) for p in fs_dir.iterdir() if (p / "COMMITTED").exists())
    with np.load(fs_dir / f"step-{step:06d}" / "arrays.npz") as arrays:
        return [arrays[k] for k in sorted(arrays.files)]


def run_python(code: str, env_extra: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for key, value in (env_extra or {}).items():
        env[key] = f"{env.get(key, '')} {value}".strip() if key == "XLA_FLAGS" else value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- data

def test_batches_are_a_pure_function_of_seed_and_step(cache):
    from steps.train.data import BatchSource

    split = TokenSplit.open(cache, "train")
    a, b = BatchSource(split, 32, 8, seed=1), BatchSource(split, 32, 8, seed=1)
    np.testing.assert_array_equal(a.batch(7), b.batch(7))           # no hidden iterator state
    assert not np.array_equal(a.batch(7), a.batch(8))
    assert not np.array_equal(a.batch(7), BatchSource(split, 32, 8, seed=2).batch(7))
    # one epoch visits every window exactly once
    steps_per_epoch = a.n_windows // 8
    starts = np.concatenate([a.window_starts(s) for s in range(steps_per_epoch)])
    assert len(set(starts.tolist())) == len(starts)
    # "which documents were in step N": every row's first token lies in a listed document
    docs = a.documents_in_step(3)
    doc_lengths = [len(ids) for ids, _ in split.documents()]
    first_tokens = np.concatenate([[0], np.cumsum(doc_lengths)[:-1]])
    for start in a.window_starts(3):
        owner = int(np.searchsorted(first_tokens, start, side="right") - 1)
        assert owner in docs


def test_window_larger_than_split_is_a_clear_error(cache):
    from steps.train.data import BatchSource

    with pytest.raises(ValueError, match="fewer than one training window"):
        BatchSource(TokenSplit.open(cache, "validation"), 10**6, 1, 0)


# ----------------------------------------------------------------------------- checkpoints

def test_checkpoint_roundtrip_and_torn_checkpoints_are_skipped(tmp_path):
    import jax
    import optax

    from steps.train import checkpoint

    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}
    state = {"params": params, "opt": optax.adam(1e-3).init(params), "step": np.int32(5)}
    out = str(tmp_path)
    checkpoint.save(out, 2, state)
    later = jax.tree.map(lambda x: np.asarray(x) + 1, state)
    checkpoint.save(out, 4, later)
    restored = checkpoint.restore(out, 4, state)
    for x, y in zip(jax.tree.leaves(restored), jax.tree.leaves(later)):
        assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y)
    assert jax.tree.structure(restored) == jax.tree.structure(state)

    # torn: step 6 never got its COMMITTED marker; step 8's arrays do not match its marker
    checkpoint.save(out, 6, later)
    (tmp_path / "checkpoints/step-000006/COMMITTED").unlink()
    checkpoint.save(out, 8, later)
    (tmp_path / "checkpoints/step-000008/arrays.npz").write_bytes(b"truncated")
    (tmp_path / "checkpoints/step-000010.tmp-dead").mkdir()            # an abandoned temp dir
    messages = []
    assert checkpoint.latest_complete(out, log=messages.append) == 4
    assert any("step-000008" in m and "checksum" in m for m in messages)
    assert any("step-000006" in m and "COMMITTED" in m for m in messages)

    checkpoint.prune(out, keep_last=1, permanent_every=2, up_to_step=8)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-000002", "step-000004"]            # torn ones gone, permanent kept

    with pytest.raises(checkpoint.CheckpointMismatch, match="leaf"):
        checkpoint.restore(out, 4, {**state, "params": {"w": params["w"], "b": np.ones(4, np.float32)}})


# ----------------------------------------------------------------------------- training

def test_training_lowers_the_loss_and_writes_its_outputs(cache, tmp_path):
    from steps.train import checkpoint, train

    out = tmp_path / "run"
    result = train(tiny_config(cache, out, num_steps=40, checkpoint_every=10, keep_checkpoints=2))
    assert result["final_load_max_over_mean"] and len(result["final_load_max_over_mean"]) == tiny_model().n_moe
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 41))
    first, last = np.mean([r["loss"] for r in rows[:3]]), np.mean([r["loss"] for r in rows[-3:]])
    assert last < first - 1.0, (first, last)
    assert {"loss", "aux_loss", "z_loss", "grad_norm", "lr", "tokens_per_s", "load_max_over_mean",
            "expert_counts"} <= set(rows[-1])
    assert len(rows[-1]["expert_counts"]) == tiny_model().n_moe
    assert checkpoint.committed_steps(str(out)) == [30, 40]          # rolling: keep the last 2
    assert result["final_step"] == 40 and result["steps_run"] == 40 and result["resumed_from_step"] is None
    assert json.loads((out / "model.json").read_text())["model"]["vocab_size"] == TokenSplit.open(cache).vocab_size
    # a finished run called again does no work
    again = train(tiny_config(cache, out, num_steps=40, checkpoint_every=10, keep_checkpoints=2))
    assert again["steps_run"] == 0 and again["resumed_from_step"] == 40


def test_metrics_are_written_between_checkpoints_for_watching_a_run(cache, tmp_path, monkeypatch):
    """A run that dies before its first checkpoint has still left the rows it logged."""
    from steps.train import loop, train

    def die(*args, **kwargs):
        raise RuntimeError("preempted before the checkpoint")

    monkeypatch.setattr(loop, "_write_checkpoint", die)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="preempted"):
        # num_steps=40: the program of the test above, compiled once per process; its first
        # checkpoint is at its last step
        train(tiny_config(cache, out, num_steps=40, checkpoint_every=40, metrics_flush_s=0))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 41)) and all(np.isfinite(r["loss"]) for r in rows)


def test_restart_after_sigkill_is_bitwise_identical_to_a_straight_run(cache, tmp_path, compile_cache):
    """Both runs live in fresh processes with the same XLA flags, as a real restart would."""
    from steps.train import checkpoint
    from steps.train.loop import MODEL_SUBDIR

    killed, straight = tmp_path / "killed", tmp_path / "straight"
    crash = f"""
        import os, signal
        from steps.train import checkpoint, loop
        from tests.steps.test_train import tiny_config
        real_save = checkpoint.save
        def save_then_die(out, step, state, subdir="checkpoints"):
            path = real_save(out, step, state, subdir)
            if step == 8:
                os.kill(os.getpid(), signal.SIGKILL)     # a hard crash right after checkpoint 8
            return path
        checkpoint.save = save_then_die
        loop.train(tiny_config({cache!r}, {str(killed)!r}))
        """
    proc = run_python(crash, compile_cache)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert checkpoint.committed_steps(str(killed)) == [4, 8]
    assert not (killed / MODEL_SUBDIR).exists()

    restart_and_straight = f"""
        import json
        from steps.train import train
        from tests.steps.test_train import tiny_config
        print("RESULT", json.dumps([train(tiny_config({cache!r}, {str(killed)!r})),
                                    train(tiny_config({cache!r}, {str(straight)!r}))]))
        """
    proc = run_python(restart_and_straight, compile_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed, straight_run = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert "resumed from checkpoint step 8" in proc.stdout
    assert resumed["resumed_from_step"] == 8 and resumed["steps_run"] == 4
    assert straight_run["resumed_from_step"] is None and straight_run["steps_run"] == 12

    for a, b in zip(load_model_export(killed), load_model_export(straight), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    losses = lambda d: [json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert losses(killed) == losses(straight)
    assert len(losses(straight)) == 12


def test_sharded_and_unsharded_training_agree_on_two_fake_devices(cache, tmp_path, compile_cache):
    code = f"""
        import json, jax, numpy as np, dataclasses
        from jax.sharding import PartitionSpec as P
        from steps.train import train, model as M
        from steps.train.sharding import expert_parallel_fn, make_mesh, state_shardings
        from tests.steps.test_train import tiny_config, load_model_export, tiny_model
        from pathlib import Path
        assert len(jax.devices()) == 2
        # the expert-parallel layer alone equals the local ragged_dot path
        cfg = dataclasses.replace(tiny_model(), vocab_size=40)
        moe = M.init_params(cfg, jax.random.key(0))["layers"][1]["moe"]
        x = jax.random.normal(jax.random.key(1), (64, cfg.d_model))
        r = M.route(moe["router"], jax.numpy.zeros(cfg.n_experts), x, cfg)
        ep = jax.jit(expert_parallel_fn(make_mesh(2, 2)))(moe["experts"], x, r.indices, r.gates)
        local = M.experts_ragged(moe["experts"], x, r.indices, r.gates)
        ep_layer_diff = float(np.max(np.abs(np.asarray(ep) - np.asarray(local))))
        spec = state_shardings({{"experts": moe["experts"]}}, make_mesh(2, 2), True)["experts"]["w_gate"].spec == P("expert", None, None)
        runs = {{}}
        for name, kw in [("one", dict(num_devices=1)), ("dp", dict(num_devices=2)),
                         ("dp_ep", dict(num_devices=2, expert_parallel=True))]:
            out = Path({str(tmp_path)!r}) / name
            runs[name] = train(tiny_config({cache!r}, out, num_steps=4, **kw))["final_loss"]
            runs[name + "_leaves"] = load_model_export(out)
        diff = lambda a, b: max(float(np.max(np.abs(x - y))) for x, y in zip(runs[a + "_leaves"], runs[b + "_leaves"]))
        print("RESULT", json.dumps({{"ep_layer": ep_layer_diff, "spec": bool(spec),
                                    "dp": diff("one", "dp"), "dp_ep": diff("one", "dp_ep"),
                                    "losses": [runs["one"], runs["dp"], runs["dp_ep"]]}}))
        """
    proc = run_python(code, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", **compile_cache})
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert result["ep_layer"] < 1e-5
    assert result["spec"] is True
    assert result["dp"] < 1e-5 and result["dp_ep"] < 1e-5, result
    assert result["losses"][0] == pytest.approx(result["losses"][1], rel=1e-5)
    assert result["losses"][0] == pytest.approx(result["losses"][2], rel=1e-5)


def test_checkpoints_work_through_fsspec_object_store_semantics():
    """memory:// has no atomic directory rename: the COMMITTED marker alone decides."""
    import jax

    from steps.train import checkpoint

    state = {"w": np.arange(4, dtype=np.float32), "n": {"k": np.ones((2, 2), np.int32)}}
    out = "memory://stepgraph-test-ckpt/run"
    checkpoint.save(out, 2, state)
    checkpoint.save(out, 4, jax.tree.map(lambda x: x * 2, state))
    import fsspec
    fsspec.filesystem("memory").rm("/stepgraph-test-ckpt/run/checkpoints/step-000004/COMMITTED")
    assert checkpoint.latest_complete(out, log=lambda _: None) == 2
    restored = checkpoint.restore(out, 2, state)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state)))
    fsspec.filesystem("memory").rm("/stepgraph-test-ckpt", recursive=True)
