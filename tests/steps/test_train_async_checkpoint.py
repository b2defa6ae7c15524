"""Asynchronous checkpoints: training goes on while a checkpoint is being written, every
checkpoint still commits, and an error in the background save fails the train step."""

from __future__ import annotations

import threading

import pytest

from steps.train import checkpoint, loop, train
from steps.train.data import BatchSource
from tests.steps.test_train import cache, tiny_config  # noqa: F401  (fixture)


def test_training_continues_while_a_checkpoint_is_written(cache, tmp_path, monkeypatch):  # noqa: F811
    later_batch_requested = threading.Event()
    real_rows, real_write = BatchSource.rows, loop._write_checkpoint
    observed = {}

    def rows(self, step, which):
        if step >= 4:               # batch index 4 trains step 5, after the save of step 4 began
            later_batch_requested.set()
        return real_rows(self, step, which)

    def slow_write(config, out, step, *rest):
        if step == 4:               # hold the save of step 4 until training has moved past it
            observed["trained_during_save"] = later_batch_requested.wait(timeout=120)
        real_write(config, out, step, *rest)

    monkeypatch.setattr(BatchSource, "rows", rows)
    monkeypatch.setattr(loop, "_write_checkpoint", slow_write)
    out = tmp_path / "run"
    train(tiny_config(cache, out, num_steps=8, checkpoint_every=4))
    assert observed == {"trained_during_save": True}
    assert checkpoint.committed_steps(str(out)) == [4, 8]


def test_an_error_in_a_background_save_fails_the_step(cache, tmp_path, monkeypatch):  # noqa: F811
    def failing_write(config, out, step, *rest):
        raise OSError(f"disk full at step {step}")

    monkeypatch.setattr(loop, "_write_checkpoint", failing_write)
    with pytest.raises(OSError, match="disk full at step 4"):
        train(tiny_config(cache, tmp_path / "run", num_steps=8, checkpoint_every=4))
