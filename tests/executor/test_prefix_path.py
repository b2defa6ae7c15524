"""Prefix-relative fixed paths (prefix_path) and override_output_path's checks (issue 18)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import executor
from executor import ConfigEncodingError, ExecutorStep, GraphError, Options, prefix_path, this_output_path
from executor.tools.identity_diff import diff_documents, render_value

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ReadConfig:
    source: str
    output_path: str


def copy_source(config: ReadConfig) -> dict:
    text = Path(config.source, "data.txt").read_text()
    Path(config.output_path, "copy.txt").write_text(text)
    return {"source": config.source}


def reader(path: str = "raw/shared") -> ExecutorStep:
    return ExecutorStep("copy", copy_source, ReadConfig(prefix_path(path), this_output_path()))


def test_hashed_as_the_relative_path_so_ids_do_not_depend_on_the_prefix(tmp_path):
    a = executor.plan([reader()], Options(prefix=str(tmp_path / "a"))).steps[0]
    b = executor.plan([reader()], Options(prefix="memory://elsewhere", runner="inline")).steps[0]
    other = executor.plan([reader("raw/other")], Options(prefix=str(tmp_path / "a"))).steps[0]
    assert a.step_id == b.step_id != other.step_id
    graph = executor.plan([reader()], Options(prefix=str(tmp_path))).graph
    assert next(iter(graph.nodes.values())).identity["config"]["fields"]["source"] == {"prefix_path": "raw/shared"}


def test_resolved_under_each_runs_prefix(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / "raw" / "shared").mkdir(parents=True)
        (tmp_path / name / "raw" / "shared" / "data.txt").write_text(f"data of {name}")
    for name in ("a", "b"):
        path = executor.materialize(reader(), Options(prefix=str(tmp_path / name), runner="inline"))
        assert Path(path, "copy.txt").read_text() == f"data of {name}"
        assert executor.load_result(reader(), prefix=str(tmp_path / name)) == {"source": str(tmp_path / name / "raw/shared")}


@pytest.mark.parametrize("bad", ["/abs/path", "gs://bucket/x", "raw/../../etc", ""])
def test_a_path_outside_the_prefix_is_refused_naming_step_and_field(tmp_path, bad):
    with pytest.raises(ConfigEncodingError, match=r"step 'copy': config field `source`.*prefix_path"):
        executor.plan([reader(bad)], Options(prefix=str(tmp_path)))


def test_explain_shows_the_placeholder():
    assert render_value({"prefix_path": "raw/a"}) == "prefix_path('raw/a')"
    [change] = diff_documents({"x": {"prefix_path": "raw/a"}}, {"x": {"prefix_path": "raw/b"}})
    assert (change.old, change.new) == ("prefix_path('raw/a')", "prefix_path('raw/b')")


def test_absolute_override_is_a_usage_error_not_an_import_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "absolute_override_experiment.py"),
                           "--prefix", str(tmp_path), "--runner", "inline"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert ("error: step 'checkpoints/run': override_output_path '/tmp/elsewhere/checkpoints/run' is absolute; "
            "it must be relative to the prefix") in done.stderr
    assert not (tmp_path / "runs").exists()


def test_relative_override_is_used_and_unsafe_ones_are_graph_errors(tmp_path):
    step = ExecutorStep("copy", copy_source, ReadConfig("x", this_output_path()), override_output_path="fixed/place")
    assert executor.plan([step], Options(prefix=str(tmp_path))).steps[0].output_path == str(tmp_path / "fixed/place")
    for bad in ("../up", "runs/x", "s3://b/k"):
        unsafe = ExecutorStep("copy", copy_source, ReadConfig("x", this_output_path()), override_output_path=bad)
        with pytest.raises(GraphError, match="override_output_path"):
            executor.plan([unsafe], Options(prefix=str(tmp_path)))
