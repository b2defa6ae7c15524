"""The one-expression fast path of validate_name accepts exactly the names the full rule accepts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.core import step as step_module
from executor.core.step import validate_name


def full_rule_accepts(name: str) -> bool:
    """The full rule alone (the fast path switched off)."""
    fast = step_module._VALID_NAME
    step_module._VALID_NAME = re.compile("(?!)")  # matches nothing
    try:
        validate_name(name)
        return True
    except ValueError:
        return False
    finally:
        step_module._VALID_NAME = fast


names = st.one_of(
    st.text(alphabet="ab1/._-=+\n runs", max_size=12),
    st.lists(st.sampled_from(["runs", "a", "..", ".", "", "b.c", "x=1", "-y", "z+"]), max_size=4).map("/".join))


@settings(max_examples=400)
@given(names)
def test_fast_path_agrees_with_the_full_rule(name):
    fast = bool(step_module._VALID_NAME.fullmatch(name))
    assert fast == full_rule_accepts(name), name


@pytest.mark.parametrize("name", ["runs", "runs/x", "/abs", ".hidden", "a//b", "a/../b", "a/./b", "a b", "a\n", ""])
def test_unsafe_names_are_refused(name):
    with pytest.raises(ValueError):
        validate_name(name)


@pytest.mark.parametrize("name", ["tokenized/shakespeare", "runsx", "a/runs", "isoflop/eval-3e+10-d32", "x=1.5"])
def test_safe_names_pass(name):
    assert validate_name(name) == name


def test_a_bad_name_declared_at_import_time_is_a_graph_error_and_exit_2(tmp_path):
    """README's words.py declares its steps at module level: a bad name there is the documented
    GraphError, one line and exit 2 (docs/python-api.md), not a ValueError traceback and exit 1."""
    experiment = tmp_path / "words.py"
    experiment.write_text(
        "from dataclasses import dataclass\n"
        "from executor import ExecutorStep, executor_main, this_output_path\n\n"
        "@dataclass(frozen=True)\nclass C:\n    output_path: str\n\n"
        "def make(config: C) -> None:\n    pass\n\n"
        "bad = ExecutorStep('words/bad name', make, C(this_output_path()))\n\n"
        "if __name__ == '__main__':\n    executor_main([bad])\n")
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, str(experiment), "--dry-run", "--prefix", str(tmp_path / "prefix")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: step name 'words/bad name' has an unsafe segment 'bad name'; use '/'-separated segments of "
        "letters, digits and _.=+- (e.g. 'tokenized/shakespeare')"], done.stderr
