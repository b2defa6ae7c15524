"""Optional experiment trackers (Weights & Biases, TensorBoard) fed with the rows of metrics.jsonl.

Chosen by a step's execution-only `trackers` field, off by default. The tracker run id is derived
from the step id, so a retry, a resume after a kill or the same experiment on another machine
continues one tracker run. metrics.jsonl stays the source of truth: a tracker that fails to start
or to log is a warning and is dropped; the step goes on.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from typing import Any

from executor import Location, open_file

KNOWN = ("wandb", "tensorboard")
WANDB_PROJECT_ENV = "WANDB_PROJECT"


def check_trackers(trackers: tuple[str, ...], where: str) -> None:
    """Raise a one-line error for an unknown tracker name (called by the config's validation)."""
    unknown = [t for t in trackers if t not in KNOWN]
    if unknown:
        raise ValueError(f"{where}.trackers: unknown tracker(s) {unknown!r}; choose from {list(KNOWN)}")


def tracker_run_id(output_path: str) -> str:
    """The step id from the step's status (its directory name when run outside the executor),
    as a tracker-safe id: letters, digits, `-` and `_`, at most 64 characters."""
    out = output_path.rstrip("/")
    step_id = out.rsplit("/", 1)[-1]
    try:
        with open_file(f"{out}/.executor/status.json", "rb") as f:
            step_id = json.loads(f.read())["step_id"]
    except (OSError, ValueError, KeyError):
        pass
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", step_id)
    return safe if len(safe) <= 64 else f"{safe[:40]}-{safe[-23:]}"


class Trackers:
    """Every tracker the step asked for; each call reaches the ones still alive."""

    def __init__(self, trackers: tuple[str, ...], output_path: str, name: str, config: dict[str, Any],
                 history: list[dict[str, Any]] = ()):
        self.output_path = output_path.rstrip("/")
        self.run_id = tracker_run_id(self.output_path) if trackers else ""
        self._live: dict[str, Any] = {}
        self._tb_local: str | None = None
        self._wandb_local: str | None = None  # a bucket output's W&B files, copied to <output>/wandb on close
        for kind in trackers:
            self._guard(kind, getattr(self, f"_start_{kind}"), name, config)
        # A killed attempt may not have flushed its last rows to the tracker: a resume sends the
        # rows metrics.jsonl kept again (a tracker server drops steps it already has).
        for row in history:
            self.log(row, int(row["step"]))

    def _guard(self, kind: str, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except Exception as e:  # a tracker is a convenience; metrics.jsonl already has the numbers
            warnings.warn(f"tracker {kind} failed and is turned off for this attempt "
                          f"(metrics.jsonl is unaffected): {type(e).__name__}: {e}", stacklevel=3)
            self._live.pop(kind, None)

    def _start_wandb(self, name: str, config: dict[str, Any]) -> None:
        import wandb

        # W&B writes <dir>/wandb/offline-run-*: the output itself on a local disk; on an object store a
        # local folder whose files close() copies to <output>/wandb. WANDB_DIR, when set, wins.
        directory = os.environ.get("WANDB_DIR")
        if not directory and not Location(self.output_path).is_local:
            directory = self._wandb_local = tempfile.mkdtemp(prefix="wandb-")
        directory = directory or self.output_path
        os.makedirs(directory, exist_ok=True)
        self._live["wandb"] = wandb.init(
            project=os.environ.get(WANDB_PROJECT_ENV, "stepgraph"), id=self.run_id, name=name, resume="allow",
            dir=directory, config=config, reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True, disable_git=True, silent=True))

    def _start_tensorboard(self, name: str, config: dict[str, Any]) -> None:
        from tensorboardX import SummaryWriter

        # Event files go to <output>/tensorboard; on object stores they are written locally and copied on flush.
        remote = not Location(self.output_path).is_local
        self._tb_local = tempfile.mkdtemp(prefix="tensorboard-") if remote else f"{self.output_path}/tensorboard"
        writer = SummaryWriter(logdir=self._tb_local, filename_suffix=f".{self.run_id}")
        writer.add_text("run", f"{name} ({self.run_id})", 0)
        self._live["tensorboard"] = writer

    def log(self, row: dict[str, Any], step: int) -> None:
        numbers = {k: float(v) for k, v in row.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if "wandb" in self._live:
            self._guard("wandb", self._live["wandb"].log, numbers, step)
        if "tensorboard" in self._live:
            writer = self._live["tensorboard"]
            self._guard("tensorboard", lambda: [writer.add_scalar(k, v, step) for k, v in numbers.items()])

    def summary(self, values: dict[str, Any]) -> None:
        """Final values of a run (an evaluation's results), logged once."""
        if "wandb" in self._live:
            run = self._live["wandb"]
            self._guard("wandb", lambda: run.summary.update(
                {k: v for k, v in values.items() if isinstance(v, (int, float, str))}))
        self.log(values, step=int(values.get("step", 0) or 0))

    def flush(self) -> None:
        if "tensorboard" in self._live:
            self._guard("tensorboard", self._flush_tensorboard)

    def _flush_tensorboard(self) -> None:
        self._live["tensorboard"].flush()
        if not Location(self.output_path).is_local and self._tb_local:
            copy_folder_to_output(self._tb_local, f"{self.output_path}/tensorboard")

    def close(self) -> None:
        # Closed first, copied after: tensorboardX's flush() can leave the last rows in its writer
        # thread, and W&B writes its offline files until finish() returns.
        if "tensorboard" in self._live:
            self._guard("tensorboard", self._live.pop("tensorboard").close)
        if "wandb" in self._live:
            self._guard("wandb", self._live.pop("wandb").finish)
        if self._tb_local and not Location(self.output_path).is_local:
            self._guard("tensorboard", copy_folder_to_output, self._tb_local, f"{self.output_path}/tensorboard")
        if self._wandb_local:
            self._guard("wandb", self._copy_wandb_files)

    def _copy_wandb_files(self) -> None:
        import wandb

        # finish() returns before W&B's service has written the run file out; teardown() waits for
        # the service to exit (this process's only W&B run is over), so the copy is whole.
        wandb.teardown()
        copy_folder_to_output(f"{self._wandb_local}/wandb", f"{self.output_path}/wandb")


def copy_folder_to_output(local_dir: str, url: str) -> None:
    """Every file under a local folder, to the same relative names under an output URL."""
    for root, _dirs, files in os.walk(local_dir):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
            with open(path, "rb") as src, open_file(f"{url}/{rel}", "wb") as dst:
                dst.write(src.read())
