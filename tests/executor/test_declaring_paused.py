"""The command line that loads an experiment file pauses the cyclic garbage collector while the file
declares its steps (issue 50: 100,000 steps declared cost 1.5 s of collections): `stepgraph run FILE`,
which owns its process and resumes the collector before any step runs, and the tools' loader
(`ids`, `check`, `explain`...), which pauses it only while the file runs. `python FILE` declares its
steps before executor_main is called: the library leaves the collector alone there."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

EXPERIMENT = '''
import atexit, gc, os
from dataclasses import dataclass
from executor import ExecutorStep, executor_main, this_output_path

print("declared with the collector:", gc.isenabled())
if os.environ.get("AT_EXIT"):  # a subprocess of the test's
    atexit.register(lambda: print("at exit:", gc.isenabled()))


@dataclass(frozen=True)
class Config:
    output_path: object


def step(config: Config) -> dict:
    import gc
    return {"collector": gc.isenabled()}


steps = [ExecutorStep(f"paused/s{i}", step, Config(this_output_path())) for i in range(3)]

if __name__ == "__main__":
    executor_main(steps)
'''


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "declared.py"
    path.write_text(EXPERIMENT)
    return path


def _lines(cmd: list[str]) -> dict[str, str]:
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "AT_EXIT": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return dict(line.split(": ", 1) for line in done.stdout.splitlines() if line.startswith(("declared", "at exit")))


def test_stepgraph_run_declares_the_steps_with_the_collector_paused_and_runs_them_with_it(experiment, tmp_path):
    prefix = str(tmp_path / "prefix")
    run = [sys.executable, "-m", "executor", "run", str(experiment), "--prefix", prefix]
    dry = _lines(run + ["--dry-run"])
    assert dry == {"declared with the collector": "False", "at exit": "True"}, dry
    ran = _lines(run + ["--runner", "inline"])
    assert ran == {"declared with the collector": "False", "at exit": "True"}, ran
    record = json.loads(next((tmp_path / "prefix").glob("paused/s0-*/.executor/record.json")).read_text())
    assert record["result"] == {"collector": True}  # steps run with the collector, as ever


def test_python_file_declares_its_steps_as_the_user_left_the_collector(experiment, tmp_path):
    plain = _lines([sys.executable, str(experiment), "--dry-run", "--prefix", str(tmp_path / "prefix")])
    assert plain["declared with the collector"] == "True", plain  # (the plan is made with it paused)


def test_python_file_whose_executor_main_declares_the_steps_declares_them_paused(experiment, tmp_path):
    """executor_main given a function declares the steps itself, inside its own pause (docs/cli.md)."""
    declare = ('def declare():\n'
               '    print("declared in executor_main with the collector:", gc.isenabled())\n'
               '    return steps\n\n\n')
    source = experiment.read_text().replace("executor_main(steps)", "executor_main(lambda _: declare())")
    experiment.write_text(source.replace('if __name__ == "__main__":', declare + 'if __name__ == "__main__":'))
    done = subprocess.run([sys.executable, str(experiment), "--dry-run", "--prefix", str(tmp_path / "prefix")],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "declared in executor_main with the collector: False" in done.stdout, done.stdout


def test_the_tools_load_an_experiment_with_the_collector_paused_and_give_it_back(experiment, capsys):
    from executor.tools.loading import load_experiment

    assert gc.isenabled()
    loaded = load_experiment(experiment)
    assert len(loaded.graph.nodes) == 3
    assert "declared with the collector: False" in capsys.readouterr().out
    assert gc.isenabled()


@pytest.mark.parametrize("argv", [["--dry-run"], ["--no-such-flag"]], ids=["dry-run", "bad-flag"])
def test_executor_main_called_in_a_process_that_goes_on_gives_the_collector_back(argv, tmp_path):
    """A notebook (or a test) that calls executor_main and catches its SystemExit: the pause its
    planning took is ended when no step ran, the collector back on and nothing frozen."""
    import executor
    from tests.executor.test_events import dag

    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    with pytest.raises(SystemExit):
        executor.executor_main(dag(), argv=[*argv, "--prefix", str(tmp_path)])
    assert gc.isenabled()
    assert gc.get_freeze_count() <= frozen  # nothing frozen (objects frozen earlier may be freed meanwhile)
