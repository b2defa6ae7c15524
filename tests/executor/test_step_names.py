"""The one-expression fast path of validate_name accepts exactly the names the full rule accepts."""

from __future__ import annotations

import re

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
