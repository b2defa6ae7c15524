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

        local = Location(self.output_path).is_local
        directory = os.environ.get("WANDB_DIR") or (self.output_path if local else tempfile.mkdtemp(prefix="wandb-"))
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
        if Location(self.output_path).is_local or not self._tb_local:
            return
        for name in os.listdir(self._tb_local):
            with open(os.path.join(self._tb_local, name), "rb") as src, \
                    open_file(f"{self.output_path}/tensorboard/{name}", "wb") as dst:
                dst.write(src.read())

    def close(self) -> None:
        self.flush()
        if "tensorboard" in self._live:
            self._guard("tensorboard", self._live.pop("tensorboard").close)
        if "wandb" in self._live:
            self._guard("wandb", self._live.pop("wandb").finish)
