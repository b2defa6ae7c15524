"""A three-step chain for the early-cutoff tests (executor/engine/run/cutoff.py), on any prefix.

    python tests/cutoff/chain_experiment.py --prefix P --runner inline [executor flags]

    cut/write  writes CUT_TEXT (default "hello world") to text.txt
    cut/upper  upper-cases it              (so "hello world" and "HELLO world" give the same bytes)
    cut/frame  writes "[<upper's text>]"

CUT_WRITE_VERSION / CUT_UPPER_VERSION: the steps' code_version (a bump re-addresses the step and all
below it). Each step that runs leaves an evidence file `ran-<name>-<uuid>` in CUT_SIDEFX (a local
directory), so a test counts real executions. CUT_WRITE_SLEEP_S: seconds cut/write sleeps.
CUT_WRITE_GATE: a local file cut/write waits for (at most 120 s) before it writes, so a test holds
its lease until it has seen what it waits for. CUT_WRITE_AWAIT_RUNS: cut/write ends only once that many
run files lie in the prefix's runs/ (a local prefix; each runner writes its own once it has planned).
Steps read and write through open_file: any prefix works.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, open_file, output_path_of, this_output_path


def _read(path: str) -> str:
    with open_file(path, "r") as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open_file(path, "w") as f:
        f.write(text)


def _ran(name: str) -> None:
    sidefx = os.environ.get("CUT_SIDEFX")
    if sidefx:
        with open(os.path.join(sidefx, f"ran-{name}-{uuid.uuid4().hex}"), "x") as f:
            f.write(str(os.getpid()))


@dataclass(frozen=True)
class WriteConfig:
    text: str
    output_path: str


@dataclass(frozen=True)
class ReadConfig:
    source: str
    output_path: str


def write(config: WriteConfig) -> None:
    _ran("write")
    gate, deadline = os.environ.get("CUT_WRITE_GATE"), time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:  # execution-only, like the sleep
        time.sleep(0.05)
    time.sleep(float(os.environ.get("CUT_WRITE_SLEEP_S", "0")))  # execution-only: lets a second runner plan
    _await_runs(config.output_path, int(os.environ.get("CUT_WRITE_AWAIT_RUNS", "0")))
    _write(f"{config.output_path}/text.txt", config.text)


def _await_runs(output_path: str, runs: int) -> None:
    """Until `runs` run files lie in the (local) prefix's runs/ (60 s at most): a run writes its run file
    once it has planned, so every runner counted has planned before write ends (an event, not a guess)."""
    folder, deadline = os.path.join(os.path.dirname(os.path.dirname(output_path)), "runs"), time.monotonic() + 60
    while runs and time.monotonic() < deadline:
        if len([n for n in os.listdir(folder) if n.endswith(".json")] if os.path.isdir(folder) else []) >= runs:
            return
        time.sleep(0.05)


def upper(config: ReadConfig) -> None:
    _ran("upper")
    _write(f"{config.output_path}/text.txt", _read(config.source).upper())


def frame(config: ReadConfig) -> None:
    _ran("frame")
    _write(f"{config.output_path}/text.txt", f"[{_read(config.source)}]")


def chain(text: str = "hello world", write_version: str | None = None,
          upper_version: str | None = None) -> list[ExecutorStep]:
    w = ExecutorStep("cut/write", write, WriteConfig(text, this_output_path()), code_version=write_version)
    u = ExecutorStep("cut/upper", upper, ReadConfig(output_path_of(w, "text.txt"), this_output_path()),
                     code_version=upper_version)
    f = ExecutorStep("cut/frame", frame, ReadConfig(output_path_of(u, "text.txt"), this_output_path()))
    return [f]


if __name__ == "__main__":
    executor_main(chain(os.environ.get("CUT_TEXT", "hello world"), os.environ.get("CUT_WRITE_VERSION"),
                        os.environ.get("CUT_UPPER_VERSION")), "cut")
