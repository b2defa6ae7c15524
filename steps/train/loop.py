"""The train step function: data -> jitted steps -> metrics.jsonl, checkpoints, resume.

Resume is exact: the state is restored bit for bit from the newest complete checkpoint and
batches are a pure function of (seed, step), so an interrupted run that restarts ends with the
same parameters as one that never stopped. metrics.jsonl is rewritten whole (one upload on object stores; not atomic on a local disk) at
every checkpoint and, so a long run can be watched, every `metrics_flush_s` between them; on
resume the rows past the restored checkpoint are dropped, so it describes one history.
Checkpoints are written in a background thread (`async_checkpoints`) while training goes on.

The same function runs in every process of a multi-host step (`Resources(hosts=N)`): the mesh
spans all processes' devices, each process reads only its own rows of every batch and writes only
its own shards of every checkpoint, and process 0 alone writes the run's files (metrics, model.json,
trackers) and commits checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
import time
import contextvars
from concurrent.futures import Future, ThreadPoolExecutor


from executor import Progress, url_to_fs
import jax
import numpy as np

from steps.token_cache import TokenSplit
from steps.tracking import Trackers
from steps.train import batch_documents, checkpoint, sharded_checkpoint
from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig
from steps.train.data import BatchSource
from steps.train.model import default_expert_fn
from steps.train.optim import learning_rate_schedule, make_optimizer
from steps.train.sharding import (batch_sharding, expert_parallel_all_to_all_fn, expert_parallel_fn, make_mesh,
                                  state_shardings)
from steps.train.state import init_state, make_train_step

MODEL_FILE_SCHEMA = 1
MODEL_SUBDIR = "model"   # final {params, router_bias}, in checkpoint format, for eval


def resolve_model_config(model: ModelConfig, cache_vocab_size: int) -> ModelConfig:
    if model.vocab_size is None:
        return dataclasses.replace(model, vocab_size=cache_vocab_size)
    if model.vocab_size < cache_vocab_size:
        raise ValueError(f"ModelConfig.vocab_size={model.vocab_size} is smaller than the token cache's "
                         f"vocab_size={cache_vocab_size}; leave it None to use the cache's")
    return model


def _write_text(path: str, text: str) -> None:
    fs, p = url_to_fs(path)
    fs.makedirs(p.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(p, text.encode())


def _read_metrics(output_path: str, up_to_step: int) -> list[dict]:
    fs, p = url_to_fs(f"{output_path}/metrics.jsonl")
    if not fs.exists(p):
        return []
    lines = [json.loads(line) for line in fs.cat_file(p).decode().splitlines() if line.strip()]
    return [m for m in lines if m["step"] <= up_to_step]


def _to_host(metrics: dict) -> dict:
    from jax.experimental import multihost_utils

    out = {}
    for key, value in metrics.items():
        if not (value.is_fully_addressable or value.is_fully_replicated):
            value = multihost_utils.process_allgather(value, tiled=True)
        value = np.asarray(value)
        out[key] = value.item() if value.ndim == 0 else value.tolist()
    return out


@functools.lru_cache(maxsize=8)
def compiled_train_step(model_cfg: ModelConfig, opt_cfg: OptimizerConfig, num_steps: int, mesh, expert_parallel: bool,
                        dispatch: str = "all_gather", capacity_factor: float | None = None, fsdp: bool = False,
                        compute_dtype: str = "float32"):
    """The jitted train step, cached so repeated runs in one process compile once."""
    optimizer = make_optimizer(opt_cfg, num_steps)
    if not expert_parallel:
        expert_fn = default_expert_fn(model_cfg)
    elif dispatch == "all_to_all":
        expert_fn = expert_parallel_all_to_all_fn(mesh, capacity_factor)
    else:
        expert_fn = expert_parallel_fn(mesh)
    template = jax.eval_shape(lambda: init_state(model_cfg, optimizer, 0))
    shardings = state_shardings(template, mesh, expert_parallel, fsdp)
    return jax.jit(make_train_step(model_cfg, optimizer, expert_fn, compute_dtype),
                   in_shardings=(shardings, batch_sharding(mesh)), out_shardings=(shardings, None),
                   donate_argnums=(0,))


def train(config: TrainConfig) -> dict:
    out = config.output_path.rstrip("/")
    split = TokenSplit.open(config.cache_path, "train")
    model_cfg = resolve_model_config(config.model, split.vocab_size)
    source = BatchSource(split, model_cfg.seq_len, config.batch_size, config.seed)
    optimizer = make_optimizer(config.optimizer, config.num_steps)

    mesh = make_mesh(config.num_devices, config.expert_devices)
    primary = jax.process_index() == 0
    template = jax.eval_shape(lambda: init_state(model_cfg, optimizer, config.seed))
    shardings = state_shardings(template, mesh, config.expert_parallel, config.fsdp)
    start = _agreed(checkpoint.latest_complete(out) or 0)
    if start:
        state = checkpoint.restore(out, start, template, shardings=shardings)
        print(f"[train] resumed from checkpoint step {start} in {out}/checkpoints", flush=True)
    else:   # built straight into its shards: no process ever holds the whole state
        state = jax.jit(lambda: init_state(model_cfg, optimizer, config.seed), out_shardings=shardings)()
    step_fn = compiled_train_step(model_cfg, config.optimizer, config.num_steps, mesh, config.expert_parallel,
                                  config.expert_dispatch, config.expert_capacity_factor, config.fsdp,
                                  config.compute_dtype)

    if primary:
        _write_text(f"{out}/model.json", json.dumps(
            {"schema": MODEL_FILE_SCHEMA, "model": dataclasses.asdict(model_cfg), "num_steps": config.num_steps}))
        _write_text(f"{out}/{batch_documents.DATA_FILE}", json.dumps(batch_documents.data_description(
            config.cache_path, model_cfg.seq_len, config.batch_size, config.seed, config.num_steps)))
    history = _read_metrics(out, start)
    tokens_per_step = config.batch_size * model_cfg.seq_len
    progress = Progress("train", total=(config.num_steps - start) * tokens_per_step, unit="tok", interval=2.0)
    run_started = time.monotonic()
    trackers = Trackers(config.trackers if primary else (), out, "train", dataclasses.asdict(config), history)
    saver = CheckpointWriter(background=config.async_checkpoints, token=_run_token())
    try:
        state = _train_steps(config, out, start, source, mesh, step_fn, state, history, trackers, saver, progress)
    finally:
        saver.close()   # a save in flight still commits (or is left torn) before we return or raise
    progress.close()
    trackers.close()

    final_step = config.num_steps
    model_dir = f"{out}/{MODEL_SUBDIR}"
    if not _agreed(final_step in checkpoint.committed_steps(out, subdir=MODEL_SUBDIR)):
        saver.save_now({"params": state["params"], "router_bias": state["router_bias"]}, out, final_step, MODEL_SUBDIR)
    steps_run = config.num_steps - start
    wall = time.monotonic() - run_started
    last = history[-1] if history else {}
    return {"final_step": final_step, "resumed_from_step": start if start else None, "steps_run": steps_run,
            "final_loss": last.get("loss"), "tokens_seen": final_step * tokens_per_step,
            "tokens_per_s": (steps_run * tokens_per_step / wall) if steps_run else None,
            "active_params_per_token": model_cfg.active_params(), "model_path": model_dir,
            "final_load_max_over_mean": last.get("load_max_over_mean")}


def _train_steps(config: TrainConfig, out: str, start: int, source: BatchSource, mesh, step_fn, state: dict,
                 history: list[dict], trackers: Trackers, saver: "CheckpointWriter", progress: Progress) -> dict:
    """Steps start..num_steps: train, log rows (metrics.jsonl, trackers), checkpoint; the final state."""
    lr_at = learning_rate_schedule(config.optimizer, config.num_steps)
    tokens_per_step = config.batch_size * source.seq_len
    window_started, window_tokens = time.monotonic(), 0
    metrics_written = time.monotonic()
    rows = batch_sharding(mesh)
    shape = (config.batch_size, source.window_len)
    for step in range(start, config.num_steps):
        # each device's rows, read by the process that holds the device: hosts read only their slice
        batch = jax.make_array_from_callback(shape, rows, lambda index, step=step: source.rows(step, index[0]))
        state, metrics = step_fn(state, batch)
        done = step + 1
        window_tokens += tokens_per_step
        if done % config.log_every == 0 or done == config.num_steps:
            row = _to_host(metrics)
            elapsed = max(time.monotonic() - window_started, 1e-9)
            row.update(step=done, lr=float(lr_at(step)), tokens_per_s=window_tokens / elapsed)
            history.append(row)
            trackers.log(row, done)
            window_started, window_tokens = time.monotonic(), 0
            if time.monotonic() - metrics_written >= config.metrics_flush_s and jax.process_index() == 0:
                _write_metrics(out, history)
                metrics_written = time.monotonic()
            progress.desc = f"train step {done}/{config.num_steps} loss {row['loss']:.4f}"
        progress.update(tokens_per_step)
        if done % config.checkpoint_every == 0 or done == config.num_steps:
            saver.save(config, out, done, state, history)
            trackers.flush()
    return state


def _write_metrics(out: str, history: list[dict]) -> None:
    _write_text(f"{out}/metrics.jsonl", "".join(json.dumps(m) + "\n" for m in history))


def _agreed(value):
    """Process 0's value in every process (a multi-host run must take the same decisions)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return type(value)(multihost_utils.broadcast_one_to_all(np.int64(value)).item())


def _run_token() -> str:
    """One random token shared by this run's processes: it tells this save's shards from leftovers."""
    return f"{_agreed(secrets.randbits(62)):016x}"


def _write_checkpoint(config: TrainConfig, out: str, step: int, host_state, history: list[dict], token: str) -> None:
    primary = jax.process_index() == 0
    # metrics first: rows past a checkpoint that never committed are dropped again on resume
    if primary:
        _write_metrics(out, history)
    _save_host_copy(out, step, host_state, token)
    if primary:
        checkpoint.prune(out, config.keep_checkpoints, config.permanent_every, up_to_step=step)


def _save_host_copy(out: str, step: int, host_state, token: str, subdir: str = "checkpoints") -> None:
    """Write what _off_devices copied: this process's shards, or the whole state."""
    if isinstance(host_state, sharded_checkpoint.HostPieces):
        checkpoint.save_sharded(out, step, host_state, token, subdir=subdir)
    else:
        checkpoint.save(out, step, host_state, subdir=subdir)


def _off_devices(state: dict):
    """A host copy of the state to write: the whole of it with one process; with several, only
    this process's shards (no process could hold the whole state of a large model)."""
    if jax.process_count() == 1:
        return jax.device_get(state)
    return sharded_checkpoint.host_pieces(state, checkpoint.leaf_path)


class CheckpointWriter:
    """Saves checkpoints, in a background thread when `background`: the state is copied to host
    memory first (the next step donates the device buffers), then the files are written while
    the following steps run. At most one save is in flight; its error surfaces at the next save
    or at close(). A process killed mid-save leaves a torn checkpoint, which resume skips.
    With several processes each writes only its own shards, and `token` (the same in all of them)
    marks this run's shards for process 0's commit."""

    def __init__(self, background: bool, token: str = ""):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint") if background else None
        self._pending: Future | None = None
        self.token = token

    def save(self, config: TrainConfig, out: str, step: int, state: dict, history: list[dict]) -> None:
        self.wait()
        host_state = _off_devices(state)
        if self._pool is None:
            _write_checkpoint(config, out, step, host_state, history, self.token)
        else:
            # in this step's context: the thread opens paths with the step's storage options
            self._pending = self._pool.submit(contextvars.copy_context().run, _write_checkpoint, config, out,
                                              step, host_state, list(history), self.token)

    def save_now(self, tree: dict, out: str, step: int, subdir: str) -> None:
        """Write `tree` as checkpoint `step` of `subdir` before returning (the final model export)."""
        self.wait()
        _save_host_copy(out, step, _off_devices(tree), self.token, subdir)

    def in_flight(self) -> bool:
        """Whether a background save is still being written."""
        return self._pending is not None and not self._pending.done()

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
