"""A 50-step DAG (mixed fan-in / fan-out) whose steps leave evidence, for the lease proofs.

    python tests/leases/dag_experiment.py --runner inline --prefix P [--steps N] [executor flags]

Steps read and write through fsspec, so any prefix works (local, gs://, s3://); storage options
come from EXECUTOR_STORAGE_OPTIONS like the executor's own. Evidence goes to the local directory
DAG_SIDEFX (one uniquely named file per event, so concurrent processes never collide):

    start-<step>-<pid>-<uuid>   the step function began (JSON: step, pid, start)
    ret-<step>-<pid>-<uuid>     the function is about to return (JSON: step, pid, runner_pid, start, end)
    violation-<step>-...        a dependency's status.json did not say SUCCESS when the step began
    commit-<step>-<pid>-<uuid>  the executor's fenced commit of this step succeeded (reporter hook)
    lost-<step>-<pid>-<uuid>    the executor reported this step's lease lost (reporter hook; JSON: reason)

DAG_SLEEP_S: seconds each step sleeps (default 0.2). Everything test-controlled is execution-only
(environment), so step ids do not depend on it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass

from executor import ExecutorStep, output_path_of, this_output_path
from executor.tools.console_reporter import ConsoleReporter


def _fs():
    import fsspec

    options = json.loads(os.environ.get("EXECUTOR_STORAGE_OPTIONS") or "{}")
    return lambda path: fsspec.core.url_to_fs(path, **(options if "://" in path else {}))[0]


def _mark(kind: str, step: str, body: dict) -> None:
    sidefx = os.environ.get("DAG_SIDEFX")
    if not sidefx:
        return
    name = f"{kind}-{step}-{os.getpid()}-{uuid.uuid4().hex}"
    # Written under a hidden name, then renamed: a SIGKILL between create and write leaves no torn marker.
    hidden = os.path.join(sidefx, f".{name}")
    with open(hidden, "x") as f:
        f.write(json.dumps(body))
    os.rename(hidden, os.path.join(sidefx, name))


@dataclass(frozen=True)
class NodeConfig:
    name: str
    deps: tuple
    output_path: str


def node(config: NodeConfig) -> dict:
    start = time.time()
    fs_of = _fs()
    step = config.name
    _mark("start", step, {"step": step, "pid": os.getpid(), "start": start})
    parts = []
    for dep in config.deps:  # no dependent may start on an uncommitted output
        fs = fs_of(dep)
        state = None
        try:
            state = json.loads(fs.cat_file(f"{dep}/.executor/status.json")).get("state")
            parts.append(fs.cat_file(f"{dep}/out.txt").decode())
        except Exception as e:  # noqa: BLE001 - recorded as a violation
            state = f"{state} ({type(e).__name__}: {e})"
        if state != "SUCCESS":
            _mark("violation", step, {"step": step, "dep": dep, "state": state, "pid": os.getpid()})
    time.sleep(float(os.environ.get("DAG_SLEEP_S", "0.2")))
    content = f"{step}<-[{','.join(parts)}]"[:2000]  # deterministic: same bytes whoever runs it
    fs = fs_of(config.output_path)
    fs.pipe_file(f"{config.output_path}/out.txt", content.encode())
    # runner_pid: the inline runner runs each step in a child process of the executor
    _mark("ret", step, {"step": step, "pid": os.getpid(), "runner_pid": os.getppid(), "start": start,
                        "end": time.time()})
    return {"len": len(content)}


def build(n_steps: int = 50, seed: int = 7) -> list[ExecutorStep]:
    rng = random.Random(seed)
    steps: list[ExecutorStep] = []
    for i in range(n_steps):
        name = f"n{i:02d}"
        if i < 6 or not steps:
            deps = []  # roots
        else:  # fan-in from 1-3 recent steps; early steps get many dependents (fan-out)
            k = rng.choice([1, 1, 2, 2, 3])
            pool = steps[max(0, i - 12):i]
            deps = rng.sample(pool, min(k, len(pool)))
        steps.append(ExecutorStep(f"dag/{name}", node,
                                  NodeConfig(name, tuple(output_path_of(d) for d in deps), this_output_path())))
    return steps


class EvidenceReporter(ConsoleReporter):
    """Marks each successful fenced commit, and each lease the run reports lost, on local disk the
    moment it happens."""

    def step_succeeded(self, node, seconds, result):
        _mark("commit", node.name.split("/")[-1], {"step": node.name, "pid": os.getpid(), "t": time.time()})
        super().step_succeeded(node, seconds, result)

    def lease_lost(self, node, reason):
        _mark("lost", node.name.split("/")[-1], {"step": node.name, "pid": os.getpid(), "reason": reason})
        super().lease_lost(node, reason)


@dataclass(frozen=True)
class DagOptions:
    steps: int = 50


if __name__ == "__main__":
    from executor.cli import run

    sys.exit(run(lambda o: build(o.steps), "lease proof DAG", config=DagOptions(), argv=sys.argv[1:],
                 reporter=EvidenceReporter()))
