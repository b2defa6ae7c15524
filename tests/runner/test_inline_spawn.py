"""The inline runner spawns each step's process (never forks): safe after JAX started its threads.

A forked child copies the parent's threads' locks in whatever state they were in, and Python
warns ("os.fork() was called ... JAX is multithreaded, so this will likely lead to a deadlock").
The experiment below imports JAX and computes with it before its steps run, as a training
experiment does; its steps are functions of the file run as __main__, found by the spawned child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from executor.engine.runner.base import StepCall
from executor.engine.runner.inline import InlineRunner

REPO = Path(__file__).resolve().parents[2]

EXPERIMENT = textwrap.dedent('''
    import json, multiprocessing, os
    from dataclasses import dataclass
    from pathlib import Path

    import jax.numpy as jnp

    from executor import ExecutorStep, executor_main, this_output_path

    @dataclass(frozen=True)
    class Where:
        output_path: str

    def where(config: Where) -> dict:
        Path(config.output_path, "where.json").write_text(json.dumps(
            {"pid": os.getpid(), "ppid": os.getppid(), "process": multiprocessing.current_process().name}))
        return {"sum": float(jnp.arange(4).sum())}

    if __name__ == "__main__":
        float(jnp.ones(3).sum())  # JAX's threads are up in the runner before any step starts
        executor_main([ExecutorStep("spawn/where", where, Where(this_output_path()))], "spawned steps")
''')


def test_a_step_runs_in_a_spawned_process_after_jax_started_with_no_fork_warning(tmp_path):
    experiment = tmp_path / "jax_experiment.py"
    experiment.write_text(EXPERIMENT)
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # a fork after JAX would print its RuntimeWarning
    proc = subprocess.Popen([sys.executable, str(experiment), "--prefix", str(tmp_path / "out"), "--runner", "inline"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "os.fork()" not in err and "deadlock" not in err, err
    [where] = list((tmp_path / "out").glob("spawn/where-*/where.json"))
    child = json.loads(where.read_text())
    assert child["ppid"] == proc.pid and child["pid"] != proc.pid  # a child of the experiment's process...
    assert child["process"].startswith("step spawn/where-")  # ...started by multiprocessing's spawn, not os.fork
    record = json.loads((where.parent / ".executor" / "record.json").read_text())
    assert record["result"] == {"sum": 6.0}


def _nested_call(output: Path) -> StepCall:
    def nested(config: str) -> dict:  # cannot travel to another process by reference
        return {}

    return StepCall("nested/step-000000000000", nested, str(output), str(output))


def test_a_function_that_cannot_travel_fails_the_step_with_the_fix(tmp_path):
    runner = InlineRunner(silence_limit_s=30)
    try:
        handle = runner.submit(_nested_call(tmp_path))
        outcome = handle.outcome()
    finally:
        runner.shutdown()
    assert not outcome.ok and "nested/step-000000000000" in outcome.error
    assert "define the function at module level" in outcome.error, outcome.error
