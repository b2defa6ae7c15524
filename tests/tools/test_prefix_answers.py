"""One checked answer for a wrong prefix (issue 47): a mis-spelled URL is refused by every command
and by runs, showing the right spelling; a missing or empty prefix is the same exit-2 line, with the
fix, from every read-only command (serve included); a run still creates a missing local prefix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.engine.prefix.prefixes import resolve_prefix
from executor.tools.commands import default_prefix

from .toy import run_main

REPO = Path(__file__).resolve().parents[2]
WRONG = {  # a spelling -> the spelling the message must show
    "gs:/bucket/runs": "write gs://bucket/runs",
    "s3:bucket": "write s3://bucket",
    "gcs:/bucket/x": "write gs://bucket/x",
    "memory:x": "write memory://x",
    "file:/tmp/x": "write /tmp/x (or file:///tmp/x)",
    "gss://bucket": "give a directory, gs://bucket/path, s3://bucket/path or memory://path",
    "s3://": "no bucket named; write s3://BUCKET/path",
}
READ_ONLY = (["status"], ["runs"], ["ps"], ["verify"], ["report"], ["status", "hello/shout"], ["verify", "hello/shout"],
             ["repair", "--delete-status", "hello/shout"])


@pytest.mark.parametrize("spelling", sorted(WRONG))
def test_a_misspelled_prefix_is_refused_by_a_run_and_the_commands_alike(spelling, toy, monkeypatch):
    monkeypatch.chdir(toy.path.parent)  # a refused prefix must create nothing here (e.g. a folder 'gs:')
    before = set(os.listdir("."))
    code, out = toy.run("--dry-run", "--prefix", spelling, prefix=False)
    assert code == 2 and f"--prefix {spelling}: " in out and WRONG[spelling] in out, out
    for command in (*READ_ONLY, ["serve", "--port", "0"], ["doctor"], ["gc", str(toy.path)]):
        code, out = run_main(*command, "--prefix", spelling)
        assert code == 2 and f"--prefix {spelling}: " in out and WRONG[spelling] in out, (command, out)
    monkeypatch.setenv("EXECUTOR_PREFIX", spelling)
    code, out = run_main("status")
    assert code == 2 and f"EXECUTOR_PREFIX {spelling}: " in out and WRONG[spelling] in out, out
    assert set(os.listdir(".")) == before


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_a_missing_or_empty_prefix_is_one_answer_with_the_fix(command, tmp_path):
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    for prefix, why in ((missing, "it does not exist"), (empty, "it holds no step outputs or run files")):
        code, out = run_main(*command, "--prefix", str(prefix))
        assert code == 2, (command, out)
        assert out.strip() == (f"error: no stepgraph outputs under {prefix}: {why}; is the prefix right? (--prefix, "
                               f"or env EXECUTOR_PREFIX; the default is cache/ in the experiment's project)"), out
    assert not missing.exists()  # looked at, not created


@pytest.mark.parametrize("which", ["missing", "empty"])
def test_serve_refuses_a_missing_or_empty_prefix_with_exit_2_as_its_help_says(which, tmp_path):
    prefix = tmp_path / which
    if which == "empty":
        prefix.mkdir()
    done = subprocess.run([sys.executable, "-m", "executor", "serve", "--prefix", str(prefix), "--port", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"no stepgraph outputs under {prefix}: " in done.stderr, done.stderr
    assert "is the prefix right?" in done.stderr and "open:" not in done.stdout


def test_a_run_creates_a_missing_local_prefix(toy):
    assert not Path(toy.prefix).exists()
    code, out = toy.run("--runner", "inline")
    assert code == 0 and Path(toy.prefix).is_dir(), out


def test_the_default_prefix_is_chosen_in_one_place(tmp_path, monkeypatch):
    """The commands' default is the runs' (executor.engine.prefix.prefixes.resolve_prefix), for every source."""
    experiment = str(tmp_path / "project" / "x.py")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "pyproject.toml").write_text("")
    monkeypatch.delenv("EXECUTOR_PREFIX", raising=False)
    for given, env in ((None, None), (None, "gcs://b/x/"), ("s3a://b/y", "gs://other"), ("rel/dir", None)):
        if env:
            monkeypatch.setenv("EXECUTOR_PREFIX", env)
        assert default_prefix(given, experiment) == resolve_prefix(given, os.environ, experiment)
    assert default_prefix(None, experiment) == "gs://other"
    monkeypatch.delenv("EXECUTOR_PREFIX")
    assert default_prefix(None, experiment) == str(tmp_path / "project" / "cache")


def test_a_misspelled_cache_from_prefix_is_refused_too(toy):
    code, out = toy.run("--dry-run", "--cache-from", "gs:/team-us/runs")
    assert code == 2 and "--cache-from gs:/team-us/runs: " in out and "write gs://team-us/runs" in out, out
