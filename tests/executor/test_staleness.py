"""Staleness by content (issue 20.1): a dependent whose consumed input changed re-runs; an identical
re-run leaves dependents alone; a later plan catches what an earlier partial run left stale."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from executor import ExecutorStep, output_path_of, this_output_path
from executor.cli import run
from executor.core.record import parse_status


@dataclass(frozen=True)
class LinkConfig:
    label: str
    output_path: str
    upstream: str | None = None


def link(config: LinkConfig) -> dict:
    seen = Path(config.upstream).read_text() if config.upstream else os.environ.get("STALE_SOURCE", "v1")
    Path(config.output_path, "out.txt").write_text(f"{config.label}<{seen}>")
    return {"label": config.label}


def chain() -> list[ExecutorStep]:
    a = ExecutorStep("stale/a", link, LinkConfig("a", this_output_path()))
    b = ExecutorStep("stale/b", link, LinkConfig("b", this_output_path(), output_path_of(a, "out.txt")))
    c = ExecutorStep("stale/c", link, LinkConfig("c", this_output_path(), output_path_of(b, "out.txt")))
    side = ExecutorStep("stale/side", link, LinkConfig("side", this_output_path()))
    return [c, side]


def go(prefix: Path, *args: str) -> int:
    return run(chain(), "stale", argv=["--prefix", str(prefix), "--runner", "inline", *args], environ={})


def attempts(prefix: Path) -> dict[str, int]:
    found = {}
    for path in prefix.glob("stale/*/.executor/status.json"):
        status = parse_status(path.read_bytes(), str(path))
        found[status.step_id.rsplit("-", 1)[0].split("/", 1)[1]] = status.attempt
    return found


def text(prefix: Path, name: str) -> str:
    return next(prefix.glob(f"stale/{name}-*/out.txt")).read_text()


@pytest.mark.parametrize("source", ["v2", "v3"])  # a's new content digest sorts below v1's, then above it
def test_force_run_reruns_the_dependents_whose_input_changed(tmp_path, monkeypatch, capsys, source):
    assert go(tmp_path) == 0
    assert text(tmp_path, "c") == "c<b<a<v1>>>"
    monkeypatch.setenv("STALE_SOURCE", source)
    capsys.readouterr()
    assert go(tmp_path, "--force-run", "stale/a", "--dry-run", "--json") == 0
    plan = {s["name"]: s for s in json.loads(capsys.readouterr().out)["steps"]}
    assert plan["stale/b"]["reason"] == "succeeded; re-run if stale/a commits a different output"
    assert go(tmp_path, "--force-run", "stale/a") == 0
    assert text(tmp_path, "c") == f"c<b<a<{source}>>>"  # the whole chain downstream is current
    assert attempts(tmp_path) == {"a": 2, "b": 2, "c": 2, "side": 1}
    assert "stale/b: stale: dependency stale/a was re-run and its output changed" in capsys.readouterr().out
    record = json.loads(next(tmp_path.glob("stale/b-*/.executor/record.json")).read_text())
    status = json.loads(next(tmp_path.glob("stale/a-*/.executor/status.json")).read_text())
    assert record["dependencies"][0]["content_sha256"] == status["content_sha256"]  # what b consumed


def test_a_rerun_with_identical_bytes_leaves_dependents_alone(tmp_path, capsys):
    assert go(tmp_path) == 0
    capsys.readouterr()
    assert go(tmp_path, "--force-run", "stale/a") == 0
    assert attempts(tmp_path) == {"a": 2, "b": 1, "c": 1, "side": 1}
    out = capsys.readouterr().out
    assert "stale/b: still current" in out
    assert "completed by another runner" not in out, out  # still current is this run's finding


def test_a_later_plan_reruns_what_a_partial_run_left_stale(tmp_path, monkeypatch, capsys):
    assert go(tmp_path) == 0
    monkeypatch.setenv("STALE_SOURCE", "v2")
    assert go(tmp_path, "--only", "stale/a", "--force-run", "stale/a") == 0  # b and c not selected
    assert attempts(tmp_path) == {"a": 2, "b": 1, "c": 1, "side": 1}
    capsys.readouterr()
    assert go(tmp_path, "--dry-run", "--json") == 0
    plan = {s["name"]: s for s in json.loads(capsys.readouterr().out)["steps"]}
    assert plan["stale/b"]["action"] == "run"
    assert plan["stale/b"]["reason"].startswith("stale: dependency stale/a was re-run after this output was made")
    assert plan["stale/c"]["action"] == "skip" and "re-run if stale/b commits" in plan["stale/c"]["reason"]
    assert go(tmp_path) == 0
    assert text(tmp_path, "c") == "c<b<a<v2>>>"
    assert attempts(tmp_path) == {"a": 2, "b": 2, "c": 2, "side": 1}


def test_a_dependency_committed_before_content_tracking_is_trusted_not_recorded_as_consumed(tmp_path):
    """A dependency whose status has no content digest (written before content tracking) gives its
    dependent nothing to compare: the dependent run on it records no input for it (not a null one)
    and is not re-run as stale when that dependency is re-run later."""
    assert go(tmp_path) == 0
    [a_status] = tmp_path.glob("stale/a-*/.executor/status.json")
    old = {k: v for k, v in json.loads(a_status.read_text()).items() if k != "content_sha256"}
    a_status.write_text(json.dumps(old))
    assert go(tmp_path, "--force-run", "stale/b") == 0
    b = parse_status(next(tmp_path.glob("stale/b-*/.executor/status.json")).read_bytes(), "b")
    assert old["digest"] not in (b.inputs or {}), b.inputs
    assert go(tmp_path, "--force-run", "stale/a") == 0  # the same bytes again, now with their digest
    assert attempts(tmp_path) == {"a": 2, "b": 2, "c": 1, "side": 1}


def test_a_dependent_rerun_over_a_skipped_dependency_records_what_it_consumed(tmp_path, monkeypatch):
    """b forced alone (a skipped) records a's committed content as its input, so a later change of
    a still makes b stale."""
    assert go(tmp_path) == 0
    assert go(tmp_path, "--force-run", "stale/b") == 0
    a = json.loads(next(tmp_path.glob("stale/a-*/.executor/status.json")).read_text())
    b = json.loads(next(tmp_path.glob("stale/b-*/.executor/status.json")).read_text())
    assert b["attempt"] == 2 and b["inputs"] == {a["digest"]: a["content_sha256"]}, b["inputs"]
    monkeypatch.setenv("STALE_SOURCE", "v2")
    assert go(tmp_path, "--force-run", "stale/a") == 0
    assert text(tmp_path, "c") == "c<b<a<v2>>>"
