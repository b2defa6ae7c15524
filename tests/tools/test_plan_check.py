"""The committed ids file (<stem>.plan.json), `stepgraph ids` and the CI check: field-level changes,
cascades, hash seeds, exit codes; `stepgraph plan`, the old name of `ids`, still works and says so."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from executor.tools.loading import load_experiment
from executor.engine.events import Events, IdsChecked
from executor.tools.plan_file import PLAN_SCHEMA, plan_file_path, run_check

from .toy import run_main

REPO = Path(__file__).resolve().parents[2]


def test_changing_a_hashed_field_fails_the_check_naming_it_and_update_plan_fixes_it(toy):
    assert toy.run("--update-plan", prefix=False)[0] == 0
    plan = json.loads(plan_file_path(toy.path).read_text())
    assert plan["schema"] == PLAN_SCHEMA and [s["name"] for s in plan["steps"]] == [
        "toy/raw", "toy/tokenize", "toy/train", "toy/report"]
    assert all({"step_id", "digest", "identity"} <= set(s) for s in plan["steps"])
    assert toy.run("--check", prefix=False)[0] == 0

    toy.write(VOCAB="8192")
    code, out = toy.run("--check", prefix=False)
    assert code == 3, out
    assert "config.tokenizer.vocab_size: 4096 -> 8192" in out
    assert "toy/train (via toy/tokenize)" in out and "toy/report (via toy/train)" in out
    assert "3 steps re-addressed by 1 change in toy/tokenize: config.tokenizer.vocab_size" in out
    assert "--update-plan" in out

    assert toy.run("--update-plan", prefix=False)[0] == 0
    assert toy.run("--check", prefix=False)[0] == 0


def test_execution_only_fields_do_not_change_the_plan(toy):
    toy.run("--update-plan", prefix=False)
    toy.write(WORKERS="16")
    code, out = toy.run("--check", prefix=False)
    assert code == 0, out


def test_added_and_removed_steps_are_reported(toy):
    toy.run("--update-plan", prefix=False)
    toy.edit_source('executor_main(steps=[summary]', 'executor_main(steps=[trained]')
    code, out = toy.run("--check", prefix=False)
    assert code == 3 and "removed: toy/report-" in out, out
    toy.run("--update-plan", prefix=False)
    toy.edit_source('executor_main(steps=[trained]', 'executor_main(steps=[summary]')
    code, out = toy.run("--check", prefix=False)
    assert code == 3 and "added: toy/report-" in out, out


def test_missing_corrupt_and_newer_plan_files_are_usage_errors(toy):
    assert toy.run("--check", prefix=False)[0] == 2  # no ids file yet
    path = plan_file_path(toy.path)
    path.write_text("{not json")
    code, out = toy.run("--check", prefix=False)
    assert code == 2 and "not a valid ids file" in out
    newer = json.dumps({"schema": PLAN_SCHEMA + 1, "steps": []})
    path.write_text(newer)
    code, out = toy.run("--update-plan", prefix=False)
    assert code == 2 and "newer" in out
    assert path.read_text() == newer  # never overwritten


def test_committed_hello_plan_is_current():
    hello = REPO / "experiments" / "hello.py"
    graph = load_experiment(hello).graph
    said: list = []
    assert run_check(graph, str(hello), events=Events([said.append])) == 0
    assert [type(e) for e in said] == [IdsChecked] and said[0].ok and said[0].path == str(plan_file_path(hello))


def test_check_directory_passes_for_hello_in_two_processes():
    # (the file, not the directory: other experiments may be slow to import; CI runs the directory)
    result = subprocess.run([sys.executable, "-m", "executor", "check", str(REPO / "experiments" / "hello.py")],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hello.py" in result.stdout and "ids identical in a second process" in result.stdout


SEEDED = '''
from dataclasses import dataclass
from executor import ExecutorStep, executor_main, this_output_path

@dataclass(frozen=True)
class C:
    names: list
    output_path: str

def f(config: C) -> None:
    pass

names = list({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"})  # hash-seed order!
if __name__ == "__main__":
    executor_main(steps=[ExecutorStep("seeded/step", f, C(names, this_output_path()))])
'''


def test_check_directory_catches_ids_that_depend_on_the_hash_seed(tmp_path):
    experiment = tmp_path / "seeded.py"
    experiment.write_text(SEEDED)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    made = subprocess.run([sys.executable, str(experiment), "--update-plan"], env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    code, out = run_main("check", str(tmp_path))
    assert code == 3, out
    assert "differ between PYTHONHASHSEED=0 and PYTHONHASHSEED=4242" in out and "seeded/step-" in out


def _main_split(*argv: str) -> tuple[int, str, str]:
    """`stepgraph argv...` in this process: (exit code, stdout, stderr)."""
    from executor.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_ids_command_prints_what_update_plan_writes(toy):
    code, out, err = _main_split("ids", str(toy.path), "--")
    assert code == 0 and not err, err
    assert [s["name"] for s in json.loads(out)["steps"]][-1] == "toy/report"
    assert toy.run("--update-plan", prefix=False)[0] == 0
    assert out == plan_file_path(toy.path).read_text()  # the ids file is exactly what `ids` prints


def test_the_old_plan_command_is_ids_with_one_line_on_stderr(toy, tmp_path):
    renamed = "`stepgraph plan` is now `stepgraph ids`\n"
    for argv in ((str(toy.path),), (str(tmp_path / "missing.py"),), (str(toy.path), "--", "--no-such-flag"), ()):
        new = _main_split("ids", *argv)
        old = _main_split("plan", *argv)
        assert old[:2] == new[:2], argv  # the same exit code and the same stdout
        assert old[2] == renamed + new[2], argv
    assert _main_split("ids", str(toy.path))[0] == 0 and _main_split("ids")[0] == 2
    code, out, err = _main_split("plan", "--help")
    assert code == 0 and out.startswith("usage: stepgraph ids") and err == renamed


def test_the_command_table_lists_ids_and_not_the_old_name():
    code, out, _ = _main_split("--help")
    commands = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.strip()]
    assert code == 0 and "ids" in commands and "check" in commands and "plan" not in commands


SECRET = '''
from dataclasses import dataclass
from executor import ExecutorStep, executor_main, secret, this_output_path

@dataclass(frozen=True)
class C:
    url: str
    output_path: str
    token: str = secret()

def f(config: C) -> None:
    pass

if __name__ == "__main__":
    executor_main(steps=[ExecutorStep("secret/step", f, C("https://x", this_output_path(), token="hunter2-token"))])
'''


def test_plan_file_never_holds_secrets(tmp_path):
    from .toy import run_file

    experiment = tmp_path / "secretive.py"
    experiment.write_text(SECRET)
    assert run_file(experiment, "--update-plan")[0] == 0
    text = plan_file_path(experiment).read_text()
    assert "https://x" in text and "hunter2" not in text and "token" not in text


def test_check_reports_an_intended_change_without_a_false_hash_seed_alarm(toy):
    # issue 20.3: the second process is compared with the first, not with the committed file
    assert toy.run("--update-plan", prefix=False)[0] == 0
    toy.write(VOCAB="8192")
    code, out = run_main("check", str(toy.path))
    assert code == 3, out
    assert "config.tokenizer.vocab_size: 4096 -> 8192" in out
    assert "ids identical in a second process (PYTHONHASHSEED=4242)" in out
    assert "differ between PYTHONHASHSEED" not in out


def test_check_called_from_python_returns_its_results_as_values_and_events_and_prints_nothing(tmp_path, capsys):
    """The library returns what `check` found and emits it as events; only the command line prints
    (the same file, through `stepgraph check`, shows the same lines)."""
    from executor.engine.events import ExperimentChecked, ExperimentsChecked, LogLine
    from executor.tools.plan_check import check_experiments

    (tmp_path / "unchecked.py").write_text("")  # no ids file: listed, not checked
    hello, seen = REPO / "experiments" / "hello.py", []
    result = check_experiments([str(hello), str(tmp_path / "unchecked.py")], subscribers=[seen.append])
    assert capsys.readouterr() == ("", "")
    assert result.exit_code == 0 and result.error is None
    [checked, unchecked] = result.experiments
    assert (checked.file, checked.exit_code, unchecked.exit_code) == (str(hello), 0, None)
    assert "ids identical in a second process (PYTHONHASHSEED=4242)" in checked.lines
    assert seen == [checked, unchecked, ExperimentsChecked(1, ())]
    missing = check_experiments([str(tmp_path / "nowhere")], subscribers=[seen.append])
    assert capsys.readouterr() == ("", "")
    assert missing.exit_code == 2 and seen[-1] == LogLine("error", missing.error) and "no such file" in missing.error
    code, out = run_main("check", str(hello), str(tmp_path / "unchecked.py"))
    assert code == 0 and out.splitlines() == [f"{hello}:", *(f"  {line}" for line in checked.lines),
                                              f"{tmp_path / 'unchecked.py'}: no unchecked.plan.json; not checked",
                                              "ids check ok for 1 experiment(s)"], out
    assert isinstance(checked, ExperimentChecked)
