"""An experiment whose steps end however a test asks, through environment variables.

    python tests/endings/gated.py --runner inline --prefix P [--variant V] [--token T]

Steps: end/first -> end/second (at override_output_path "end/shared"), and end/long, independent.
ENDING_<NAME> (FIRST, SECOND, LONG) picks a step's behaviour: "" (quick), "sleep:S" (rewrite
part-0..2 every 0.1 s for S seconds: a heartbeat and, when paused past its lease, a late writer),
"gate" (wait for the file ENDING_SIDEFX/go), "hang", "raise", "ki" (raise KeyboardInterrupt),
"nan" (return non-finite floats), "big:MB" (return a string of MB megabytes).
ENDING_TIMEOUT_<NAME> sets that step's Resources(timeout_s). ENDING_TAG is written into every part,
so two runners' bytes differ. Each step leaves `start-<name>-<pid>` in ENDING_SIDEFX. Only
`--variant` is hashed (it changes end/first's and end/second's ids, for an output-path clash).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, executor_main, output_path_of, secret, this_output_path
from executor.core.step import Resources
from executor.engine.prefix import location


@dataclass(frozen=True)
class Job:
    name: str
    output_path: str
    after: str | None = None
    variant: str = ""


@dataclass(frozen=True)
class Options:
    variant: str = ""
    token: str = secret("")


def _mark(name: str) -> Path | None:
    sidefx = os.environ.get("ENDING_SIDEFX")
    if not sidefx:
        return None
    Path(sidefx, f"start-{name}-{os.getpid()}").write_text(str(time.time()))
    return Path(sidefx)


def job(config: Job) -> dict:
    behaviour = os.environ.get(f"ENDING_{config.name.upper()}", "")
    tag = os.environ.get("ENDING_TAG", "x")
    sidefx = _mark(config.name)
    fs, root = location.url_to_fs(config.output_path)
    kind, _, arg = behaviour.partition(":")
    if kind == "gate":
        while not (sidefx / "go").exists():
            time.sleep(0.05)
    elif kind == "hang":
        while True:
            time.sleep(1)
    elif kind == "raise":
        raise RuntimeError(f"{config.name} failed on purpose")
    elif kind == "ki":
        raise KeyboardInterrupt(f"{config.name} raised KeyboardInterrupt itself")
    rounds = int(float(arg) / 0.1) if kind == "sleep" else 1
    for i in range(rounds):
        fs.pipe_file(f"{root}/part-{i % 3}", f"{tag}:{config.name}:{i}".encode())
        if kind == "sleep":
            time.sleep(0.1)
    for i in range(3):  # the final bytes: the same files, rewritten by whoever runs the step
        fs.pipe_file(f"{root}/part-{i}", f"{tag}:{config.name}:final".encode())
    if kind == "nan":
        return {"loss": float("nan"), "best": float("inf"), "worst": float("-inf")}
    if kind == "big":
        return {"blob": "x" * int(float(arg) * 2**20)}
    return {"rounds": rounds}


def _resources(name: str) -> Resources | None:
    timeout = os.environ.get(f"ENDING_TIMEOUT_{name.upper()}")
    return Resources(timeout_s=float(timeout)) if timeout else None


def build(options: Options) -> list[ExecutorStep]:
    first = ExecutorStep("end/first", job, Job("first", this_output_path(), variant=options.variant),
                         resources=_resources("first"))
    second = ExecutorStep("end/second", job, Job("second", this_output_path(), output_path_of(first),
                                                 variant=options.variant),
                          override_output_path="end/shared", resources=_resources("second"))
    long = ExecutorStep("end/long", job, Job("long", this_output_path()), resources=_resources("long"))
    return [second, long]


if __name__ == "__main__":
    executor_main(build, "endings", config=Options())
