"""The train step as a multi-host test runs it: the real `train`, plus what the test needs to see
(which batch rows each host read, which run files it wrote) and, on request, a host process that
SIGKILLs itself once."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from steps.train import TrainConfig, checkpoint, loop, train
from steps.train.data import BatchSource


@dataclass(frozen=True)
class HostTrain:
    train: TrainConfig
    kill_host: int = -1     # this host process dies by SIGKILL right after writing its shards of
    kill_after: int = 8     # checkpoint `kill_after`, on the first try only


def host_train(config: HostTrain) -> dict:
    import jax

    me = jax.process_index()
    out = Path(config.train.output_path)
    out.mkdir(parents=True, exist_ok=True)
    rows_read: list[list[int]] = []
    run_files_written: list[str] = []    # model.json, the data description, metrics.jsonl
    real_rows, real_save = BatchSource.rows, checkpoint.save_sharded
    real_text, real_metrics = loop._write_text, loop._write_metrics

    def rows(self, step, which):
        picked = range(self.batch_size)[which]
        rows_read.append([step, picked.start, picked.stop])
        return real_rows(self, step, which)

    def save_then_die(output_path, step, host, token, subdir="checkpoints"):
        path = real_save(output_path, step, host, token, subdir)
        marker = out / "killed-once"
        if subdir == "checkpoints" and step == config.kill_after and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return path

    def write_text(path, text):
        run_files_written.append(path.rsplit("/", 1)[-1])
        real_text(path, text)

    def write_metrics(output, history):
        run_files_written.append("metrics.jsonl")
        real_metrics(output, history)

    BatchSource.rows, loop._write_text, loop._write_metrics = rows, write_text, write_metrics
    if me == config.kill_host:
        checkpoint.save_sharded = save_then_die
    try:
        result = train(config.train)
    finally:
        BatchSource.rows, checkpoint.save_sharded = real_rows, real_save
        loop._write_text, loop._write_metrics = real_text, real_metrics
    (out / f"rows-host{me}.json").write_text(json.dumps({"pid": os.getpid(), "rows": rows_read,
                                                         "run_files_written": run_files_written}))
    return result
