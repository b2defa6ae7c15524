"""Once JAX is imported (or while connected to Ray) the inline runner spawns each step's process (never forks it): safe after
JAX started its threads (without JAX it forks, which is cheaper; tests/executor/test_run_inline.py).

A forked child copies the parent's threads' locks in whatever state they were in, and Python
warns ("os.fork() was called ... JAX is multithreaded, so this will likely lead to a deadlock").
The experiment below imports JAX and computes with it before its steps run, as a training
experiment does; its steps are functions of the file run as __main__, sent to the child by value:
the child never runs the script again (a script calling executor.run() at top level must not run
once per step).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from executor.engine.runner.base import StepCall
from executor.engine.runner.inline import InlineRunner

REPO = Path(__file__).resolve().parents[2]

EXPERIMENT = textwrap.dedent('''
    import json, os, sys
    from dataclasses import dataclass
    from pathlib import Path

    import jax.numpy as jnp

    from executor import ExecutorStep, executor_main, this_output_path

    @dataclass(frozen=True)
    class Where:
        output_path: str

    def where(config: Where) -> dict:
        Path(config.output_path, "where.json").write_text(json.dumps(
            {"pid": os.getpid(), "ppid": os.getppid(), "main": getattr(sys.modules["__main__"], "__file__", None)}))
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
    assert child["main"] is None  # ...a fresh interpreter (a fork would have the experiment as __main__)
    record = json.loads((where.parent / ".executor" / "record.json").read_text())
    assert record["result"] == {"sum": 6.0}


def test_a_call_that_cannot_travel_fails_the_step_with_the_fix(tmp_path):
    lock = threading.Lock()  # no process but this one can have it

    def nested(config: str) -> dict:  # a nested function travels by value; what it holds must too
        with lock:
            return {}

    runner = InlineRunner(silence_limit_s=30, start_method="spawn")
    try:
        outcome = runner.submit(StepCall("nested/step-000000000000", nested, str(tmp_path), str(tmp_path))).outcome()
    finally:
        runner.shutdown()
    assert not outcome.ok and "nested/step-000000000000" in outcome.error
    assert "cannot pickle '_thread.lock' object" in outcome.error and "must pickle" in outcome.error, outcome.error


SCRIPT = textwrap.dedent('''
    import sys
    from dataclasses import dataclass
    from pathlib import Path

    import jax  # with JAX imported, steps run in spawned children

    import executor

    Path(sys.argv[1], "top-level-runs").open("a").write("ran\\n")  # once per process that runs this file

    @dataclass(frozen=True)
    class Shout:
        text: str

    def shout(config: Shout) -> str:
        spawned = getattr(sys.modules["__main__"], "__file__", None) is None  # a fork has this script
        return f"{config.text.upper()} spawned={spawned}"

    step = executor.ExecutorStep("script/shout", shout, Shout("hi"))
    result = executor.run([step], prefix=str(Path(sys.argv[1], "out")), runner="inline")
    print(result.ok, executor.load_result(step, prefix=str(Path(sys.argv[1], "out"))))
''')


def test_a_script_calling_run_at_top_level_runs_once_and_its_own_function_in_the_spawned_child(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["True", "HI", "spawned=True"], done.stdout
    assert (tmp_path / "top-level-runs").read_text() == "ran\n"  # the child did not run the script again


CONNECTED = textwrap.dedent('''
    import json, sys
    from dataclasses import dataclass
    from pathlib import Path

    import ray

    import executor
    from executor import ExecutorStep, this_output_path

    @dataclass(frozen=True)
    class Seen:
        output_path: str

    def seen(config: Seen) -> None:
        import ray  # a forked child has the parent's module, connection state and all
        Path(config.output_path, "seen.json").write_text(json.dumps({"ray_connected": ray.is_initialized()}))

    if __name__ == "__main__":
        ray.init(address=sys.argv[2], log_to_driver=False)
        try:
            assert "jax" not in sys.modules  # JAX's own rule is not what decides here
            step = ExecutorStep("connected/seen", seen, Seen(this_output_path()))
            executor.run([step], prefix=sys.argv[1], runner="inline").raise_on_failure()
        finally:
            ray.shutdown()
''')


def test_a_process_connected_to_ray_spawns_its_inline_steps(tmp_path, ray_head):
    """A forked child of a Ray driver would believe itself connected (`ray.is_initialized()`) and
    hang on the first task it sent down the parent's connection, as a step mapping its shards on
    Ray did after a Ray run in the same process; the child is spawned instead."""
    experiment = tmp_path / "connected.py"
    experiment.write_text(CONNECTED)
    proc = subprocess.run([sys.executable, str(experiment), str(tmp_path / "out"), ray_head.address], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [seen] = list((tmp_path / "out").glob("connected/seen-*/seen.json"))
    assert json.loads(seen.read_text()) == {"ray_connected": False}
