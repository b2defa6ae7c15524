"""The whole CLI path in-process with the inline runner: runs, re-runs, failures, bad input."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from executor.cli import run
from executor.core.record import State, parse_status
from experiments import hello


def hello_run(prefix: Path, *args: str) -> int:
    return run(hello.build, "hello", config=hello.HelloOptions(),
               argv=["--prefix", str(prefix), "--runner", "inline", *args], environ={},
               main_file=hello.__file__)


@pytest.fixture(scope="module")
def hello_done(tmp_path_factory) -> Path:
    """One completed hello run (its 5 steps and run file), made once for the module: a test that only
    reads it takes it as it is; one that runs again over it takes a copy (`copy_of`)."""
    prefix = tmp_path_factory.mktemp("hello-done")
    assert hello_run(prefix) == 0
    return prefix


def copy_of(done: Path, tmp_path: Path) -> Path:
    """A prefix holding what one complete hello run left (a local prefix is its files: a copy is one)."""
    return Path(shutil.copytree(done, tmp_path / "prefix"))


def statuses(prefix: Path) -> dict[str, dict]:
    out = {}
    for path in prefix.glob("hello/*/.executor/status.json"):
        status = parse_status(path.read_bytes(), str(path))
        out[status.step_id] = status
    return out


def by_name(prefix: Path) -> dict[str, list]:
    found: dict[str, list] = {}
    for sid, status in statuses(prefix).items():
        found.setdefault(sid.rsplit("-", 1)[0], []).append(status)
    return found


def test_run_then_rerun_skips(tmp_path, capsys):
    assert hello_run(tmp_path) == 0
    assert all(s.state == State.SUCCESS for s in statuses(tmp_path).values()) and len(statuses(tmp_path)) == 5
    summary = next(tmp_path.glob("hello/summary-*/summary.txt")).read_text()
    assert "HELLO!" in summary and "'the' (3x)" in summary
    capsys.readouterr()
    assert hello_run(tmp_path) == 0
    assert "all 5 step(s) already succeeded" in capsys.readouterr().out
    assert len(list((tmp_path / "runs").glob("hello-*.json"))) == 1  # a no-op re-run writes nothing


def test_record_and_run_file_contents(hello_done):
    tmp_path = hello_done  # read only
    record = json.loads(next(tmp_path.glob("hello/count-*/.executor/record.json")).read_text())
    assert record["schema"] == 1 and record["result"] == {"distinct": 10}
    assert record["manifest"] == [{"path": "counts.json", "size": record["manifest"][0]["size"],
                                   "checksum": record["manifest"][0]["checksum"]}]
    assert record["manifest"][0]["checksum"]["algorithm"] == "sha256"
    assert record["dependencies"][0]["name"] == "hello/words"
    assert record["provenance"]["function"] == "experiments.hello:count_words"
    assert record["provenance"]["function_sha256"]
    assert record["config"]["words_path"].endswith("words.json")
    run_file = json.loads(next((tmp_path / "runs").glob("hello-*.json")).read_text())
    assert run_file["exit_code"] == 0 and len(run_file["plan"]) == 5
    assert run_file["invocation"]["git"].keys() >= {"commit", "dirty"}
    assert {"user", "host", "argv", "packages"} <= run_file["invocation"].keys()


def test_run_file_says_where_everything_is(tmp_path):
    """The prefix and, per step, output path, plan decision and final status (issue 18)."""
    env_prefix = tmp_path / "from-env"
    code = run(hello.build, "hello", config=hello.HelloOptions(), argv=["--runner", "inline", "--fail-shout"],
               environ={"EXECUTOR_PREFIX": str(env_prefix)}, main_file=hello.__file__)
    assert code == 1
    run_file = json.loads(next((env_prefix / "runs").glob("hello-*.json")).read_text())
    assert run_file["prefix"] == str(env_prefix)
    steps = {s["name"]: s for s in run_file["steps"]}
    assert {n: (s["decision"], s["status"]) for n, s in steps.items()} == {
        "hello/words": ("run", "succeeded"), "hello/count": ("run", "succeeded"),
        "hello/greeting": ("run", "succeeded"), "hello/shout": ("run", "failed"),
        "hello/summary": ("run", "blocked")}
    assert "failing on purpose" in steps["hello/shout"]["error"]
    for s in steps.values():
        assert s["output_path"] == str(env_prefix / s["step_id"])
        assert Path(s["output_path"], ".executor", "status.json").exists() == (s["status"] != "blocked")
    # the next run (retrying the failure) records the skips too, with their paths
    assert run(hello.build, "hello", config=hello.HelloOptions(), argv=["--runner", "inline"],
               environ={"EXECUTOR_PREFIX": str(env_prefix)}, main_file=hello.__file__) == 0
    latest = max((env_prefix / "runs").glob("hello-*.json"), key=lambda p: json.loads(p.read_text())["started_at"])
    steps = {s["name"]: s for s in json.loads(latest.read_text())["steps"]}
    assert steps["hello/words"]["decision"] == "skip" and steps["hello/words"]["status"] == "succeeded"
    assert steps["hello/shout"]["decision"] == "run" and steps["hello/summary"]["status"] == "succeeded"


def test_changing_a_hashed_field_reruns_only_affected_steps(hello_done, tmp_path):
    tmp_path = copy_of(hello_done, tmp_path)
    before = {n: len(v) for n, v in by_name(tmp_path).items()}
    assert hello_run(tmp_path, "--greeting", "Howdy") == 0
    after = {n: len(v) for n, v in by_name(tmp_path).items()}
    assert after == {**before, "hello/greeting": 2, "hello/shout": 2, "hello/summary": 2}


def test_execution_only_flag_does_not_rerun(hello_done, tmp_path):
    tmp_path = copy_of(hello_done, tmp_path)
    assert hello_run(tmp_path, "--pause-s", "0.01") == 0
    assert all(len(v) == 1 for v in by_name(tmp_path).values())


@pytest.mark.timeout(90)  # a dependent left waiting on a failed step never ends: fail it, well before the suite's limit
def test_failure_blocks_dependents_other_branches_finish_then_force_failed(tmp_path, capsys):
    assert hello_run(tmp_path, "--fail-shout") == 1
    states = {n: v[0].state for n, v in by_name(tmp_path).items()}
    assert states == {"hello/words": State.SUCCESS, "hello/count": State.SUCCESS,
                      "hello/greeting": State.SUCCESS, "hello/shout": State.FAILED}
    shout = by_name(tmp_path)["hello/shout"][0]
    assert "failing on purpose" in shout.error and "RuntimeError" in shout.traceback_tail
    out = capsys.readouterr().out
    assert "hello/summary blocked" in out and "failed or blocked" in out
    # --force-failed false stops at the failure and names it
    assert hello_run(tmp_path, "--force-failed", "false") == 1
    out = capsys.readouterr().out
    assert "hello/shout" in out and "failing on purpose" in out and "--force-failed false leaves it" in out
    # default: the failed step is retried (same id: fail_for_demo is execution-only)
    failed_seq = by_name(tmp_path)["hello/shout"][0].seq
    assert hello_run(tmp_path) == 0
    assert all(v[0].state == State.SUCCESS for v in by_name(tmp_path).values())
    retried = by_name(tmp_path)["hello/shout"][0]
    assert retried.attempt == 2
    assert retried.seq >= failed_seq + 2  # the retry's RUNNING, then its SUCCESS: a status's seq only grows


def test_dry_run_writes_nothing_and_json_is_machine_readable(tmp_path, capsys):
    prefix = tmp_path / "p"
    assert hello_run(prefix, "--dry-run", "--json") == 0
    plan = json.loads(capsys.readouterr().out)
    assert [s["action"] for s in plan["steps"]] == ["run"] * 5
    assert not prefix.exists()
    assert hello_run(prefix, "--dry_run", "true") == 0  # draccus spelling
    assert not prefix.exists()


def test_corrupt_status_is_a_clear_error_and_left_untouched(hello_done, tmp_path, capsys):
    tmp_path = copy_of(hello_done, tmp_path)
    status_file = next(tmp_path.glob("hello/count-*/.executor/status.json"))
    status_file.write_text('{"schema": 1, "state": "SUCC')
    assert hello_run(tmp_path) == 2
    err = capsys.readouterr().err
    assert "corrupt status file" in err and str(status_file) in err and "repair" in err
    assert status_file.read_text() == '{"schema": 1, "state": "SUCC'


def test_newer_schema_is_refused_not_overwritten(hello_done, tmp_path, capsys):
    tmp_path = copy_of(hello_done, tmp_path)
    status_file = next(tmp_path.glob("hello/words-*/.executor/status.json"))
    data = json.loads(status_file.read_text())
    data["schema"] = 99
    status_file.write_text(json.dumps(data))
    assert hello_run(tmp_path) == 2
    err = capsys.readouterr().err
    assert "newer than this executor" in err and str(status_file) in err
    assert json.loads(status_file.read_text())["schema"] == 99


def test_unwritable_prefix(tmp_path, capsys):
    if os.geteuid() == 0:
        target = Path("/proc/stepgraph-cannot-write-here")
    else:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o500)
    assert hello_run(target) == 2
    assert "not writable" in capsys.readouterr().err


def test_bad_flags_exit_2(tmp_path, capsys):
    assert hello_run(tmp_path, "--no-such-flag", "1") == 2
    assert hello_run(tmp_path, "--only", "(") == 2
    assert "not a valid regular expression" in capsys.readouterr().err
    assert hello_run(tmp_path, "--max-concurrent", "abc") == 2  # a value of the wrong type: no traceback
    err = capsys.readouterr().err
    assert "--max-concurrent: 'abc' is not an integer" in err and "Traceback" not in err
    assert hello_run(tmp_path, "--pause-s", "soon") == 2  # the same for the experiment's own flags
    assert "--pause-s: 'soon' is not a number" in capsys.readouterr().err


@dataclass(frozen=True)
class Shadowing:
    prefix: str = "mine"


def test_experiment_flag_shadowing_an_executor_flag_is_an_error(tmp_path, capsys):
    code = run(lambda cfg: hello.build(hello.HelloOptions()), config=Shadowing(), argv=[], environ={})
    assert code == 2 and "shadow executor flags" in capsys.readouterr().err


def test_prefix_from_environment(tmp_path):
    code = run(hello.build, config=hello.HelloOptions(), argv=["--runner", "inline"],
               environ={"EXECUTOR_PREFIX": str(tmp_path / "env")}, main_file=hello.__file__)
    assert code == 0 and (tmp_path / "env" / "runs").is_dir()



def test_help_describes_every_executor_flag_and_the_experiment_flags(capsys):
    import dataclasses
    import itertools

    from executor.cli import ExecutorOptions

    assert run(hello.build, config=hello.HelloOptions(), argv=["--help"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for f in dataclasses.fields(ExecutorOptions):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  --{f.name.replace('_', '-')} "))
        wrapped = [lines[at], *itertools.takewhile(lambda line: line.startswith("      "), lines[at + 1:])]
        assert " ".join(f.metadata["help"].split()) in " ".join(" ".join(wrapped).split())  # wrapped to the terminal
    assert "--greeting" in out and "the word the greeting starts with" in out  # the experiment's comments


def test_runs_in_one_process_probe_a_new_prefix_at_once_without_tripping_each_other(tmp_path):
    """The write probe had one name per process: one run removed the other's, which then said the
    prefix was not writable (two runs in one process racing for the same copies failed so)."""
    import threading

    from executor.engine.prefix.outputs import check_writable

    errors: list = []

    def probe(i: int) -> None:
        try:
            for _ in range(200):
                check_writable(str(tmp_path / "new-prefix"))
        except Exception as e:  # noqa: BLE001 - collected for the assert
            errors.append(e)

    threads = [threading.Thread(target=probe, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:2]
    assert not list((tmp_path / "new-prefix").iterdir())  # no probe left behind


def test_a_failure_left_by_force_failed_false_keeps_its_reason_beside_steps_that_run(tmp_path):
    """The stopped step's reason reaches the result even when other steps run (the run loop tracks it)."""
    from executor import run as run_steps

    assert hello_run(tmp_path, "--fail-shout") == 1
    other_text = hello.build(hello.HelloOptions(text="other words here"))  # words and count run again
    result = run_steps(other_text, prefix=str(tmp_path), runner="inline", force_failed=False)
    by_step = {s.name: s for s in result.steps}
    assert by_step["hello/words"].ran_here and not by_step["hello/shout"].ran_here
    assert "failing on purpose" in by_step["hello/shout"].error
    assert "--force-failed false leaves it" in by_step["hello/shout"].error
