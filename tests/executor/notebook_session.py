"""A notebook session, fed to `python -` so that, as in Jupyter, __main__ has no __file__.

Plans, runs and materializes through executor's Python API, with a step function defined here
in __main__ (as a notebook cell would), then prints what it saw as one JSON line.
Argv (via the STEPGRAPH_NB_* environment): the prefix and the runner.
"""
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import executor
from executor import ExecutorStep, output_path_of, this_output_path
from experiments import hello

prefix, runner = os.environ["STEPGRAPH_NB_PREFIX"], os.environ["STEPGRAPH_NB_RUNNER"]


@dataclass(frozen=True)
class ExclaimConfig:
    summary_path: str
    output_path: str


def exclaim(config: ExclaimConfig) -> dict:  # defined in the notebook (__main__)
    text = Path(config.summary_path).read_text().strip()
    Path(config.output_path, "exclaimed.txt").write_text(text + "!!\n")
    return {"chars": len(text)}


[summary] = hello.build(hello.HelloOptions(greeting="Hi"))
exclaimed = ExecutorStep("nb/exclaim", exclaim, ExclaimConfig(output_path_of(summary, "summary.txt"),
                                                              this_output_path()))
options = executor.Options(prefix=prefix, runner=runner)

before = executor.plan([exclaimed], options)
ran = executor.run([exclaimed], options)
path = executor.materialize(summary, options)  # already done: returns at once with its path
again = executor.run([exclaimed], options)
print(json.dumps({
    "planned": {s.name: s.decision for s in before.steps},
    "ran": {s.name: [s.decision, s.status, s.ran_here] for s in ran.steps},
    "exclaim_path": ran.output_path(exclaimed),
    "exclaimed": Path(ran.output_path(exclaimed), "exclaimed.txt").read_text(),
    "materialized": path,
    "again": {s.name: [s.decision, s.status] for s in again.steps},
    "run_file": ran.run_file, "again_run_file": again.run_file,
    "threads_left": sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()),
    "ray_initialized": __import__("ray").is_initialized() if "ray" in __import__("sys").modules else False,
}))
