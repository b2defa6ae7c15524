"""Asynchronous checkpoints: training goes on while a checkpoint is being written, every
checkpoint still commits, an error in the background save fails the train step, and a process
killed during an overlapped save resumes from the checkpoint before it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from executor.core.locations import Storage
from executor.engine.prefix import location
from tests.steps.test_train import REPO, cache, compile_cache, load_model_export, run_python, tiny_config  # noqa: F401

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def test_training_continues_while_a_checkpoint_is_written(cache, tmp_path, monkeypatch):  # noqa: F811
    from steps.train import checkpoint, loop, train
    from steps.train.data import BatchSource

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
    from steps.train import checkpoint, loop, train

    def failing_write(config, out, step, *rest):
        raise OSError(f"disk full at step {step}")

    monkeypatch.setattr(loop, "_write_checkpoint", failing_write)
    with pytest.raises(OSError, match="disk full at step 4"):
        train(tiny_config(cache, tmp_path / "run", num_steps=8, checkpoint_every=4))


def test_a_kill_during_an_overlapped_save_leaves_the_previous_checkpoint_usable(cache, tmp_path, compile_cache):  # noqa: F811
    """A real process is SIGKILLed while its save of step 8 is in flight (arrays written, marker
    not yet) and training has gone on past it: checkpoint 4 is restored and the run finishes as a
    run that was never interrupted does."""
    from steps.train import checkpoint, loop, train

    killed, straight, flags = tmp_path / "killed", tmp_path / "straight", tmp_path / "flags"
    flags.mkdir()
    child = f"""
        import pathlib, threading
        from steps.train import checkpoint, loop
        from steps.train.data import BatchSource
        from tests.steps.test_train import tiny_config
        flags = pathlib.Path({str(flags)!r})

        class MarkerHangs:   # the fs of the save of step 8: the COMMITTED marker never goes in
            def __init__(self, fs):
                self.fs = fs
            def __getattr__(self, name):
                return getattr(self.fs, name)
            def pipe_file(self, path, data, **kwargs):
                if path.endswith("step-000008/COMMITTED"):
                    (flags / "save-8-in-flight").touch()
                    threading.Event().wait()
                return self.fs.pipe_file(path, data, **kwargs)

        real_fs, real_rows = checkpoint._fs, BatchSource.rows
        checkpoint._fs = lambda out, subdir="checkpoints": (lambda fs, root: (MarkerHangs(fs), root))(
            *real_fs(out, subdir))
        def rows(self, step, which):
            (flags / f"batch-{{step}}").touch()
            return real_rows(self, step, which)
        BatchSource.rows = rows
        loop.train(tiny_config({cache!r}, {str(killed)!r}))
        """
    env = {**os.environ, "PYTHONPATH": str(REPO), **compile_cache}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(child)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        # the save of 8 is in flight and batch 9 (step 10) was read: training went on during the save
        while not ((flags / "save-8-in-flight").exists() and (flags / "batch-9").exists()):
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the child never reached an overlapped save"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert (killed / "checkpoints" / "step-000008" / "arrays.npz").exists()   # torn: written, never committed
    assert checkpoint.committed_steps(str(killed)) == [4]

    restart = f"""
        import json
        from steps.train import train
        from tests.steps.test_train import tiny_config
        print("RESULT", json.dumps([train(tiny_config({cache!r}, {str(killed)!r})),
                                    train(tiny_config({cache!r}, {str(straight)!r}))]))
        """
    proc = run_python(restart, compile_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed, _ = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert resumed["resumed_from_step"] == 4 and resumed["steps_run"] == 8
    assert "skipping torn checkpoint" in proc.stderr
    for a, b in zip(load_model_export(killed), load_model_export(straight), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_a_background_save_writes_with_the_steps_storage_options(cache, tmp_path, monkeypatch):  # noqa: F811
    """The runner puts the run's storage options in the step's context (location.using); the
    writer thread must use them too, or a save to a bucket would go out without credentials."""
    from steps.train import checkpoint, loop, train

    seen = []
    real_write = loop._write_checkpoint

    def recording_write(config, out, step, *rest):
        seen.append((threading.current_thread().name, location.current_storage()))
        real_write(config, out, step, *rest)

    monkeypatch.setattr(loop, "_write_checkpoint", recording_write)
    out = tmp_path / "run"
    storage = Storage({"s3://elsewhere": {"anon": True}})   # the object's identity is what is checked
    with location.using(storage):
        # num_steps=8 as in the tests above: the train step compiled once per process
        train(tiny_config(cache, out, num_steps=8, checkpoint_every=4))
    assert [name.startswith("checkpoint") for name, _ in seen] == [True, True]
    assert all(options is storage for _, options in seen)
    assert checkpoint.committed_steps(str(out)) == [4, 8]
