"""The train step as a multi-host test runs it: the real `train`, plus what the test needs to see
(which batch rows each host read) and, on request, a host process that SIGKILLs itself once."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from steps.train import TrainConfig, checkpoint, train
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
    real_rows, real_save = BatchSource.rows, checkpoint.save_sharded

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

    BatchSource.rows = rows
    if me == config.kill_host:
        checkpoint.save_sharded = save_then_die
    try:
        result = train(config.train)
    finally:
        BatchSource.rows, checkpoint.save_sharded = real_rows, real_save
    (out / f"rows-host{me}.json").write_text(json.dumps({"pid": os.getpid(), "rows": rows_read}))
    return result
