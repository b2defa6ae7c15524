"""A field added with `hashed_unless_default` leaves the ids made before it existed unchanged while
it holds its default, and is hashed like any field when it does not."""

from __future__ import annotations

import dataclasses

import pytest

from executor import ExecutorStep, this_output_path
from executor.core.canonical import CanonicalEncoder, encode_value
from executor.core.errors import ConfigEncodingError
from executor.core.identity import identity_and_digest
from executor.core.step import hashed_unless_default


def no_deps(placeholder):
    raise AssertionError("no dependencies here")


@dataclasses.dataclass(frozen=True)
class Before:
    output_path: str
    lr: float = 0.1
    tag: object = "x"


@dataclasses.dataclass(frozen=True)
class After:   # Before, once `dtype` (and `zeta`, sorted last) were added
    output_path: str
    lr: float = 0.1
    tag: object = "x"
    dtype: str = hashed_unless_default("float32")
    zeta: float = hashed_unless_default(0.0)


After.__qualname__ = Before.__qualname__   # the same class, in two versions


def step_digest(config) -> str:
    return identity_and_digest(ExecutorStep("train/x", print, config), no_deps)[1]


def test_a_field_at_its_default_leaves_the_id_as_it_was_before_the_field():
    assert step_digest(After(this_output_path())) == step_digest(Before(this_output_path()))
    assert step_digest(After(this_output_path(), lr=0.2)) == step_digest(Before(this_output_path(), lr=0.2))
    assert "dtype" not in encode_value(After(this_output_path()), no_deps)["fields"]


@pytest.mark.parametrize("change", [{"dtype": "bfloat16"}, {"zeta": 0.5}, {"zeta": -0.0}, {"zeta": 0},
                                    {"dtype": None}])
def test_any_other_value_is_hashed(change):
    """Another value, an equal value of another type, or -0.0 for 0.0: each is a new id."""
    changed = After(this_output_path(), **change)
    assert step_digest(changed) != step_digest(Before(this_output_path()))
    fields = encode_value(changed, no_deps)["fields"]
    assert set(change) <= set(fields) and "lr" in fields and "output_path" in fields


def test_fields_are_named_in_errors_and_the_encoding_is_stable_across_encoders():
    config = After(this_output_path(), dtype="bfloat16")
    shared = CanonicalEncoder(no_deps)
    assert shared.config_text(config) == shared.config_text(config) == CanonicalEncoder(no_deps).config_text(config)
    with pytest.raises(ConfigEncodingError, match="tag"):
        CanonicalEncoder(no_deps).config_text(After(this_output_path(), dtype="bfloat16", tag=object()), "train/x")


def test_the_default_must_be_a_plain_constant():
    with pytest.raises(TypeError, match=r"hashed_unless_default\(\[1\]\)"):
        hashed_unless_default([1])
