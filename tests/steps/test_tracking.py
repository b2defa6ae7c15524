"""Trackers: W&B offline files and TensorBoard event files read back for the logged values, one
tracker run id (from the step id) across a SIGKILL and a resume, and a failing tracker as a warning."""

from __future__ import annotations

import glob
import json
import signal
import struct
import time
from pathlib import Path

import pytest

from executor.core.record import State, Status
from steps.tracking import tracker_run_id
from tests.steps.test_train import cache, compile_cache, run_python, tiny_config  # noqa: F401  (fixtures)

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax

STEP_ID = "train/tiny-0123456789ab"
RUN_ID = "train-tiny-0123456789ab"
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def plant_status(out: Path) -> None:
    """The status the executor writes before it runs a step: the trackers read the step id from it."""
    (out / ".executor").mkdir(parents=True)
    status = Status(State.RUNNING, "0123456789ab" * 5, STEP_ID, seq=0, attempt=1, owner=None, written_at=time.time())
    (out / ".executor" / "status.json").write_bytes(status.to_bytes())


def wandb_records(path: str):
    """The protobuf records of an offline W&B run file (a leveldb-style log of 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, pending = Path(path).read_bytes(), 7, b""  # 7: ":W&B", magic, version
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        pending += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def read_wandb(out: Path) -> list[tuple[str, dict[int, float]]]:
    """(run id, {step: loss}) per offline run directory, oldest first. W&B names the file after the
    run id too: a SIGKILLed attempt's file may hold only its header (W&B's writer had not flushed)."""
    runs = []
    for path in sorted(glob.glob(f"{out}/wandb/offline-run-*/run-*.wandb")):
        run_id, losses = Path(path).name[len("run-"):-len(".wandb")], {}
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                assert record.run.run_id == run_id, (record.run.run_id, path)
            elif kind == "history":
                items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                if "loss" in items:
                    losses[items["_step"]] = items["loss"]
        runs.append((run_id, losses))
    return runs


def read_tensorboard(out: Path) -> tuple[list[str], dict[int, float]]:
    """Event file names and {step: loss} from the TFRecord event files under <out>/tensorboard."""
    from tensorboardX.proto import event_pb2

    files, losses = sorted(glob.glob(f"{out}/tensorboard/events.out.tfevents.*")), {}
    for path in files:
        data, pos = Path(path).read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                if value.tag == "loss":
                    losses[event.step] = value.simple_value
    return [Path(f).name for f in files], losses


def test_one_tracker_run_across_a_kill_and_a_resume(cache, tmp_path, compile_cache):  # noqa: F811
    out = tmp_path / "override-dir"  # not the step id: the run id must come from the status
    plant_status(out)
    config = f"tiny_config({cache!r}, {str(out)!r}, trackers=('wandb', 'tensorboard'))"
    crash = f"""
        import os, signal
        from steps.train import checkpoint, loop
        from tests.steps.test_train import tiny_config
        real_save = checkpoint.save
        def save_then_die(out, step, state, subdir="checkpoints"):
            path = real_save(out, step, state, subdir)
            if step == 8:
                os.kill(os.getpid(), signal.SIGKILL)
            return path
        checkpoint.save = save_then_die
        loop.train({config})
        """
    proc = run_python(crash, {**compile_cache, **OFFLINE})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    proc = run_python(f"from steps.train import train\nfrom tests.steps.test_train import tiny_config\n"
                      f"train({config})", {**compile_cache, **OFFLINE})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from checkpoint step 8" in proc.stdout

    truth = {row["step"]: row["loss"] for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert sorted(truth) == list(range(1, 13))
    runs = read_wandb(out)
    assert [run_id for run_id, _ in runs] == [RUN_ID, RUN_ID]  # the resume continued the same run
    (_, before_kill), (_, after_resume) = runs
    # what the killed attempt flushed before dying is a prefix of the truth; the resume sends the
    # rows metrics.jsonl kept again, so the run holds every step once synced
    assert sorted(after_resume) == list(range(1, 13))
    for step, loss in [*before_kill.items(), *after_resume.items()]:
        assert loss == pytest.approx(truth[step], rel=1e-6)

    names, tb_losses = read_tensorboard(out)
    assert len(names) == 2 and all(name.endswith(f".{RUN_ID}") for name in names)
    assert sorted(tb_losses) == list(range(1, 13))
    for step, loss in tb_losses.items():
        assert loss == pytest.approx(truth[step], rel=1e-5)


def test_a_failing_tracker_is_a_warning_and_training_completes(cache, tmp_path, monkeypatch):  # noqa: F811
    from steps.train import train

    monkeypatch.setenv("WANDB_MODE", "not-a-mode")  # wandb.init refuses this
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="tracker wandb failed"):
        result = train(tiny_config(cache, out, num_steps=4, trackers=("wandb",)))
    assert result["final_step"] == 4
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 4


def test_unknown_tracker_is_a_one_line_error_naming_the_field(tmp_path):
    from steps.train import TrainConfig

    with pytest.raises(ValueError, match=r"TrainConfig.trackers: unknown tracker\(s\) \['mlflow'\]"):
        TrainConfig(cache_path="c", output_path=str(tmp_path), trackers=("mlflow",))


def test_run_id_is_the_step_id_or_the_directory_name(tmp_path):
    out = tmp_path / "override-dir"
    assert tracker_run_id(str(out)) == "override-dir"  # outside the executor: the directory
    plant_status(out)
    assert tracker_run_id(str(out)) == RUN_ID
    assert len(tracker_run_id(str(tmp_path / ("x" * 100)))) <= 64


def test_a_bucket_outputs_tracker_files_reach_the_output(tmp_path):
    """On an object store, W&B's offline run and TensorBoard's event files are written locally and
    copied under <output>/wandb and <output>/tensorboard (as the docs say), not left in a temp folder:
    every file W&B wrote, byte for byte, and every row TensorBoard got. In a process of its own, as a
    step runs (W&B keeps the settings of a process's first run)."""
    copy = tmp_path / "copy"
    proc = run_python(f"""
        import os
        os.environ.pop("WANDB_DIR", None)
        from executor import url_to_fs
        from steps.tracking import Trackers
        out = "memory://tracking-test/train-tiny"
        trackers = Trackers(("wandb", "tensorboard"), out, "tiny", {{"lr": 0.1}})
        for step in (1, 2, 3):
            trackers.log({{"step": step, "loss": 1.0 / step}}, step)
        trackers.close()
        fs, root = url_to_fs(out)
        fs.get(root, {str(copy)!r}, recursive=True)   # memory:// lives in this process: copy it out
        print(trackers._wandb_local)
    """, env_extra=OFFLINE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = Path(proc.stdout.strip().splitlines()[-1]) / "wandb"
    files = sorted(p.relative_to(written) for p in written.rglob("*") if p.is_file())
    assert any(f.name == "run-train-tiny.wandb" for f in files), files
    assert sorted(p.relative_to(copy / "wandb") for p in (copy / "wandb").rglob("*") if p.is_file()) == files
    assert all((copy / "wandb" / f).read_bytes() == (written / f).read_bytes() for f in files)
    assert [losses for _, losses in read_wandb(copy)] == [{1: 1.0, 2: 0.5, 3: pytest.approx(1 / 3)}]
    assert read_tensorboard(copy)[1] == {1: 1.0, 2: 0.5, 3: pytest.approx(1 / 3)}
