"""`stepgraph`: one command line with one argument shape (issue 19).

gc honours the experiment flags after `--` (19.1), status and runs view a whole prefix (19.3), the
default prefix belongs to the experiment's project (19.4), --version, completion and did-you-mean
(19.6/19.7), typos get true answers (19.9), a closed pipe is no traceback (19.10).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from executor.__main__ import build_parser

from .toy import run_main

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "experiments" / "hello.py"
STEPGRAPH = shutil.which("stepgraph", path=str(Path(sys.executable).parent)) or "stepgraph"


def run_hello(prefix: Path, *flags: str, expect: int = 0) -> None:
    code, out = run_main("run", "--prefix", str(prefix), str(HELLO), "--runner", "inline", *flags)
    assert code == expect, out


def step_dirs(prefix: Path) -> set[str]:
    return {str(p.parent.parent.relative_to(prefix)) for p in prefix.glob("hello/*/.executor/status.json")}


@pytest.mark.parametrize("delete", [False, True])
def test_gc_keeps_every_output_the_flags_after_dashes_reach(tmp_path, delete):
    run_hello(tmp_path, "--greeting", "Hi")
    made = step_dirs(tmp_path)
    assert len(made) == 5
    extra = ["--delete", "--grace-hours", "0"] if delete else []
    code, out = run_main("gc", "--prefix", str(tmp_path), str(HELLO), *extra, "--", "--greeting", "Hi")
    assert code == 0, out
    assert "5 output(s) reachable" in out and "0 unreachable" in out
    assert step_dirs(tmp_path) == made
    # without the flags, the greeting branch is unreachable: listed with the run that wrote it
    code, out = run_main("gc", "--prefix", str(tmp_path), str(HELLO))
    assert "3 unreachable" in out and "written by:" in out and "--greeting Hi" in out
    assert step_dirs(tmp_path) == made  # listing deletes nothing


def test_status_of_a_whole_prefix_an_experiment_and_a_step(tmp_path):
    run_hello(tmp_path, "--fail-shout", expect=1)
    code, out = run_main("status", "--prefix", str(tmp_path))
    assert code == 1, out  # a failed step is a problem found
    assert "hello/shout-" in out and "FAILED" in out and "failing on purpose" in out
    code, out = run_main("status", "--prefix", str(tmp_path), "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["hello/shout"]["state"] == "FAILED" and rows["hello/shout"]["attempt"] == 1
    assert rows["hello/words"]["state"] == "SUCCESS" and rows["hello/words"]["seconds"] is not None
    assert rows["hello/words"]["run_id"] == rows["hello/shout"]["run_id"]
    assert "hello/summary" not in rows  # blocked: never started, so nothing on storage

    code, out = run_main("status", "--prefix", str(tmp_path), "--json", str(HELLO), "--", "--fail-shout")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["hello/summary"]["state"] == "NO STATUS" and len(rows) == 5

    for ref in ("hello/words", rows["hello/words"]["step_id"], rows["hello/words"]["path"]):
        code, out = run_main("status", "--prefix", str(tmp_path), ref)  # a step named three ways
        assert code == 0 and out.startswith(rows["hello/words"]["step_id"] + "  SUCCESS"), out


def test_runs_lists_the_history_with_what_each_run_did(tmp_path):
    run_hello(tmp_path)
    run_hello(tmp_path, "--greeting", "Howdy")
    code, out = run_main("runs", "--prefix", str(tmp_path), "--json")
    assert code == 0
    runs = json.loads(out)
    assert [len(r["ran"]) for r in runs] == [3, 5]  # newest first: the greeting branch re-ran
    assert runs[0]["exit_code"] == 0 and "--greeting" in runs[0]["argv"] and runs[0]["skipped"] == 2
    code, out = run_main("runs", "--prefix", str(tmp_path))
    assert out.count("hello-") == 2 and "Howdy" in out


def test_runs_table_keeps_the_flags_from_any_checkout_path_and_width(tmp_path, monkeypatch):
    """Issue 35: a checkout under a 150-character path, a 60-column terminal: the experiment is
    shown relative to the run's project and every flag is kept; --json keeps the full argv."""
    run_hello(tmp_path, "--greeting", "Howdy")
    deep = "/nowhere/" + "/".join(["a-checkout-folder-deeper-than-usual"] * 4)
    assert len(deep) > 140
    run_file = next((tmp_path / "runs").glob("hello-*.json"))
    run = json.loads(run_file.read_text())
    run["invocation"].update(cwd=deep, argv=[f"{deep}/experiments/hello.py", *run["invocation"]["argv"][1:]])
    run["experiment_file"] = f"{deep}/experiments/hello.py"
    run_file.write_text(json.dumps(run))
    monkeypatch.setenv("COLUMNS", "60")
    code, out = run_main("runs", "--prefix", str(tmp_path))
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("hello-"))
    assert "experiments/hello.py --runner inline --greeting Howdy --prefix" in line and deep not in line, line
    code, out = run_main("runs", "--prefix", str(tmp_path), "--json")
    assert json.loads(out)[0]["argv"][0] == f"{deep}/experiments/hello.py"


def test_typos_get_true_answers(tmp_path):
    for argv in (["ps"], ["status"], ["runs"], ["gc", str(HELLO)]):
        code, out = run_main(*argv, "--prefix", str(tmp_path / "nope"))
        assert code == 2 and "no stepgraph outputs under" in out and "is the prefix right?" in out, (argv, out)
    code, out = run_main("check", str(tmp_path / "nope.py"))
    assert code == 2 and "no such file or directory" in out
    code, out = run_main("status", "--prefxi", "x")
    assert code == 2 and "did you mean --prefix?" in out
    code, out = run_main("verify", "--prefix", str(tmp_path), "--", "--greeting", "Hi")
    assert code == 2 and "loads no experiment" in out


def test_step_names_are_resolved_or_listed(tmp_path):
    run_hello(tmp_path)
    code, out = run_main("verify", "--prefix", str(tmp_path), "hello/count")
    assert code == 0 and "1 step(s) verified" in out
    code, out = run_main("status", "--prefix", str(tmp_path), "hello/cuont")
    assert code == 2 and "did you mean hello/count" in out


def test_every_command_has_prefix_and_the_docs_list_every_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    reference = (REPO / "docs" / "cli.md").read_text()
    for name, p in sub.choices.items():
        options = {s for a in p._actions for s in a.option_strings}
        if name not in ("ids", "check", "completion"):
            assert "--prefix" in options, name
        assert f"stepgraph {name}" in reference, f"docs/cli.md does not show `stepgraph {name}`"


def _bare_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EXECUTOR_PREFIX", "PYTHONPATH")}
    return {**env, "HOME": str(tmp_path)}


def test_console_script_version_completion_and_a_closed_pipe(tmp_path):
    env = _bare_env(tmp_path)
    version = subprocess.run([STEPGRAPH, "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("stepgraph 0."), version
    alias = subprocess.run([sys.executable, "-m", "executor", "--version"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert alias.stdout == version.stdout

    script = subprocess.run([STEPGRAPH, "completion", "bash"], capture_output=True, text=True, env=env, timeout=60)
    probe = script.stdout + '\nCOMP_WORDS=(stepgraph st); COMP_CWORD=1; _stepgraph; echo "${COMPREPLY[@]}"\n' \
        'COMP_WORDS=(stepgraph gc --gr); COMP_CWORD=2; _stepgraph; echo "${COMPREPLY[@]}"\n' \
        'COMP_WORDS=(stepgraph i); COMP_CWORD=1; _stepgraph; echo "${COMPREPLY[@]}"\n' \
        'COMP_WORDS=(stepgraph p); COMP_CWORD=1; _stepgraph; echo "${COMPREPLY[@]}"\n'
    completed = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
    assert completed.stdout.splitlines() == ["status", "--grace-hours", "ids", "ps"], completed  # not `plan`

    run_hello(tmp_path / "p")
    reader_gone = subprocess.Popen([STEPGRAPH, "status", "--prefix", str(tmp_path / "p"), "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    reader_gone.stdout.close()  # like `| head -0`: the reader left before anything was written
    err = reader_gone.stderr.read().decode()
    assert reader_gone.wait(timeout=60) == 141 and "Traceback" not in err and "Exception ignored" not in err, err


def test_default_prefix_is_the_experiments_project_not_the_working_directory(tmp_path):
    project = tmp_path / "project"
    (project / "exps").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    shutil.copy(HELLO, project / "exps" / "hello_copy.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**_bare_env(tmp_path), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, str(project / "exps" / "hello_copy.py"), "--dry-run"],
                            cwd=elsewhere, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"prefix: {project / 'cache'}" in result.stdout
    assert not (elsewhere / "cache").exists() and not (project / "cache").exists()  # a dry run writes nothing
    tool = subprocess.run([STEPGRAPH, "status", "--json", str(project / "exps" / "hello_copy.py")],
                          cwd=elsewhere, capture_output=True, text=True, env=env, timeout=120)
    assert tool.returncode == 0, tool.stderr
    assert all(r["path"].startswith(str(project / "cache")) for r in json.loads(tool.stdout))


def test_a_dry_run_into_a_closed_pipe_ends_quietly(tmp_path):
    for extra in ([], ["--json"]):  # rich's table, and print()
        dry = subprocess.Popen([sys.executable, str(HELLO), "--prefix", str(tmp_path), "--dry-run", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_bare_env(tmp_path))
        dry.stdout.close()
        err = dry.stderr.read().decode()
        code = dry.wait(timeout=120)
        assert code != 0 and "Traceback" not in err and "Exception ignored" not in err, (extra, code, err)
