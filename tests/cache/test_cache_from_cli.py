"""--cache-from through the command line of experiments/hello.py (issue 30): the flag (repeatable),
the dry run (the copy, its source and size; what is not needed; nothing written) and the JSON plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.executor.test_hello_ray import HELLO
from tests.tools.toy import run_file


@pytest.fixture(scope="module")
def hello_a(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("hello-a")
    code, out = run_file(HELLO, "--prefix", str(prefix), "--runner", "inline")
    assert code == 0, out
    return prefix


def test_dry_run_shows_the_copy_and_what_is_not_needed_and_writes_nothing(hello_a, tmp_path):
    b = tmp_path / "b"
    code, out = run_file(HELLO, "--prefix", str(b), "--cache-from", str(tmp_path / "empty"),
                         "--cache-from", str(hello_a), "--dry-run")  # repeated: the first holds nothing
    flat = " ".join(out.split())
    assert code == 0, out
    assert "hello/summary" in flat and "copy from " + str(hello_a) in flat.replace("│ ", "").replace(" │", ""), out
    assert "not needed here (every step that reads them is copied or complete): hello/words, hello/count, " \
           "hello/greeting, hello/shout" in flat, out
    code, out, err = run_file(HELLO, "--prefix", str(b), "--cache-from", str(hello_a), "--dry-run", "--json",
                              split=True)
    assert code == 0, err
    [row] = json.loads(out)["steps"]
    assert (row["name"], row["action"]) == ("hello/summary", "copy")
    assert row["copy_from"][0]["prefix"] == str(hello_a) and row["copy_from"][0]["bytes"] > 0
    assert not b.exists()


def test_the_environment_variable_names_the_sources(hello_a, tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTOR_CACHE_FROM", str(hello_a))
    code, out, err = run_file(HELLO, "--prefix", str(tmp_path / "b"), "--dry-run", "--json", split=True)
    assert code == 0 and [r["action"] for r in json.loads(out)["steps"]] == ["copy"], out + err


def test_status_of_a_copied_step_says_where_it_came_from(hello_a, tmp_path):
    import subprocess
    import sys

    b = tmp_path / "b"
    code, out = run_file(HELLO, "--prefix", str(b), "--runner", "inline", "--cache-from", str(hello_a))
    assert code == 0 and "copied" in out, out
    run_id = json.loads(next((hello_a / "runs").glob("*.json")).read_text())["run_id"]
    shown = subprocess.run([sys.executable, "-m", "executor", "status", "--prefix", str(b), "hello/summary"],
                           capture_output=True, text=True, timeout=120, cwd=HELLO.parents[1])
    assert shown.returncode == 0, shown.stderr
    assert f"copied from {hello_a} (run {run_id}, 43 B in" in shown.stdout, shown.stdout


def test_a_later_run_without_cache_from_skips_the_copy_and_makes_nothing_upstream(hello_a, tmp_path):
    """After a copy (of the target only), a run at B without --cache-from skips it and does not make
    the steps it was made from; the dry run says they are not needed; `verify` is clean; `status`
    (table and JSON) says it was copied and from where; `gc` keeps the copy and finds nothing else;
    its record names the outputs it was made from where they are (under A), not paths under B that
    were never made."""
    from tests.tools.toy import run_main

    b = tmp_path / "b"
    code, out = run_file(HELLO, "--prefix", str(b), "--runner", "inline", "--cache-from", str(hello_a))
    assert code == 0, out
    made = sorted(p.relative_to(b) for p in (b / "hello").rglob("*"))
    code, out = run_file(HELLO, "--prefix", str(b), "--runner", "inline")
    assert code == 0 and "already succeeded; nothing to do" in out, out
    assert sorted(p.relative_to(b) for p in (b / "hello").rglob("*")) == made  # nothing new: no upstream made
    for again in ((), ("--cache-from", str(hello_a))):
        code, out = run_file(HELLO, "--prefix", str(b), "--dry-run", *again)
        assert code == 0 and "not needed here (every step that reads them is copied or complete): hello/words, " \
                             "hello/count, hello/greeting, hello/shout" in " ".join(out.split()), out
    code, out = run_main("verify", "--prefix", str(b))
    assert code == 0 and "1 step(s) verified, 0 problem(s)" in out, out
    code, out = run_main("status", "--prefix", str(b))
    assert code == 0 and "SUCCESS" in out and f"  copied from: {hello_a}\n" in out, out
    code, out = run_main("status", "--prefix", str(b), "--json")
    assert code == 0 and [row["copied_from"] for row in json.loads(out)] == [str(hello_a)], out
    code, out = run_main("gc", str(HELLO), "--prefix", str(b), "--delete", "--grace-hours", "0")
    assert code == 0 and "1 output(s) reachable" in out and "0 unreachable" in out, out
    [summary] = (b / "hello").glob("summary-*")
    record = json.loads((summary / ".executor" / "record.json").read_text())
    assert record["dependencies"] and all(Path(d["path"]).is_relative_to(hello_a) and Path(d["path"]).exists()
                                          for d in record["dependencies"]), record["dependencies"]
