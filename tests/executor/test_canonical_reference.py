"""The fast canonical encoder gives byte-identical ids to the reference (pre-issue-14) encoder."""

from __future__ import annotations

import collections
import dataclasses
import enum
import pathlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from executor import ExecutorStep, execution_only, output_path_of, this_output_path
from executor.core.canonical import CanonicalEncoder, encode_value
from executor.core.graph import build_graph
from executor.core.identity import identity_and_digest
from executor.core.tree import fold
from tests.executor import reference_canonical as reference


class Color(enum.Enum):
    RED = 1
    BLUE = "b"


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = 0.5
    tags: tuple = ()


@dataclasses.dataclass(frozen=True)
class Outer:
    a: object = None
    b: object = None
    inner: object = Inner()
    workers: int = execution_only(4)


def fn(config):
    return None


leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6), st.binary(max_size=6),
    st.sampled_from([Color.RED, Color.BLUE, pathlib.PurePosixPath("a/b"), pathlib.PurePosixPath("/x"),
                     this_output_path(), this_output_path("sub"), float("inf"), -0.0]))


def trees(leaf):
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.frozensets(st.integers(), max_size=4),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.builds(Inner, st.floats(), st.tuples(inner)),
        st.builds(Outer, inner, inner, inner, st.integers())), max_leaves=16)


def no_deps(placeholder):
    raise AssertionError("no dependencies here")


@settings(max_examples=300)
@given(trees(leaves))
def test_fast_encoder_matches_the_reference(config):
    expected = reference.canonical_json(reference.encode_value(config, no_deps))
    assert CanonicalEncoder(no_deps).config_text(config) == expected


@dataclasses.dataclass(frozen=True)
class Defaults:
    """Every kind of default the generated encoder encodes once and reuses while a field holds it."""

    n: int = 7
    big: int = 10**20
    s: str = "héllo 世界"
    zero: float = -0.0
    flag: bool = True
    none: object = None
    nested: tuple = (1, 2.5, ("x", None, False))
    empty: tuple = ()
    holds_list: tuple = (1, [2])  # not a constant: a list inside can change
    mutable: list = dataclasses.field(default_factory=lambda: [1, 2])
    inner: object = Inner()


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(Defaults)]), trees(leaves)))
@example({})
@example({"flag": 1, "zero": 0.0, "n": 7.0, "none": False, "empty": []})  # equal to the default, not it
@example({"nested": (1, 2.5, ("x", None, False)), "s": "héllo " + "世界"})  # equal and the same text
def test_fields_holding_their_defaults_encode_as_the_reference_does(overrides):
    config = Defaults(**overrides)
    expected = reference.canonical_json(reference.encode_value(config, no_deps))
    assert CanonicalEncoder(no_deps).config_text(config) == expected


def test_a_default_that_can_change_is_encoded_as_it_is_now():
    config = Defaults()
    config.holds_list[1].append(3)
    config.mutable.append(3)
    try:
        text = CanonicalEncoder(no_deps).config_text(config)
        assert '"holds_list":{"tuple":[1,[2,3]]}' in text and '"mutable":[1,2,3]' in text
    finally:
        config.holds_list[1].remove(3)


class Level(enum.IntEnum):
    ONE = 1  # == 1, but encoded as an enum


Flags = collections.namedtuple("Flags", "a b c")  # == to a plain tuple of the same items, encoded as a namedtuple


@dataclasses.dataclass(frozen=True)
class Made:
    """default_factory fields: the generated encoder writes the factory's text while a value is exactly that data."""

    tags: list = dataclasses.field(default_factory=lambda: ["marin", "bench"])
    extra: dict = dataclasses.field(default_factory=lambda: {"mode": "train", "shards": [1, 2, 3], "off": None})
    flags: tuple = dataclasses.field(default_factory=lambda: (True, None, 0))
    rates: list = dataclasses.field(default_factory=lambda: [0.0, 1.5])  # floats: no template (0.0 == -0.0)
    empty: dict = dataclasses.field(default_factory=dict)


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(Made)]), trees(leaves)))
@example({})
@example({"tags": ["marin", "bench", "x"], "flags": (1, None, 0), "rates": [-0.0, 1.5], "empty": {"": None}})
@example({"tags": ("marin", "bench"), "flags": (True, None, False), "extra": {"mode": "train", "shards": [1, 2, 3]}})
@example({"flags": Flags(True, None, 0), "extra": {"mode": "train", "shards": [Level.ONE, 2, 3], "off": None}})
@example({"extra": {"mode": "train", "shards": [1, 2, 3.0], "off": None}, "flags": (1.0, None, 0)})
@example({"extra": {"mode": "train", "shards": (1, 2, 3), "off": None}, "tags": ["marin", b"bench"]})
@example({"extra": {"mode": "train", "shards": [1, 2, 3], "of": None}, "empty": []})
def test_fields_holding_their_default_factorys_value_encode_as_any_value_does(overrides):
    config = Made(**overrides)
    text = CanonicalEncoder(no_deps).config_text(config)
    for f in dataclasses.fields(Made):  # each field as the encoder writes that value anywhere else
        assert f'"{f.name}":{CanonicalEncoder(no_deps).text(getattr(config, f.name))}' in text
    if not isinstance(config.flags, Flags):  # the reference encoder predates namedtuples' own form
        assert text == reference.canonical_json(reference.encode_value(config, no_deps))


@settings(max_examples=100)
@given(trees(leaves))
def test_the_text_is_canonical_json(config):
    text = CanonicalEncoder(no_deps).config_text(config)
    assert reference.canonical_json(encode_value(config, no_deps)) == text


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 50), trees(leaves)), min_size=1, max_size=8))
def test_graph_ids_match_the_reference_and_memoisation_is_invisible(specs):
    """Steps sharing sub-config objects (memoised) and depending on each other (placeholders)."""
    shared = Inner(0.25, ("shared",))
    steps: list[ExecutorStep] = []
    for i, (seed, value) in enumerate(specs):
        deps = tuple(output_path_of(steps[j], f"p{j}") for j in range(len(steps)) if (seed + j) % 3 == 0)
        config = Outer(a=(deps, value), b=shared, inner=[shared, value])
        steps.append(ExecutorStep(f"s{i}", fn, config))
    graph = build_graph(steps)
    for step in steps:
        digest_of = lambda p: graph.digest_of(p.step)  # noqa: E731
        document = {"schema": 1, "name": step.name, "code_version": step.code_version,
                    "config": reference.encode_value(step.config, digest_of, step.name)}
        assert identity_and_digest(step, digest_of)[0] == reference.canonical_bytes(document)
        assert graph.nodes[graph.digest_of(step)].identity_bytes == reference.canonical_bytes(document)


@settings(max_examples=100)
@given(trees(leaves))
def test_the_encoder_and_tree_fold_see_the_same_placeholders(config):
    """One structure, two walkers: what fold finds is what the encoder hashes."""
    found: list = []
    fold(config, lambda v, path: found.append(v) if hasattr(v, "sub") else v, lambda v, c, p: None)
    assert CanonicalEncoder(no_deps).config_text(config).count('"this_output"') == len(found)


@pytest.mark.parametrize("shape", ["small tuple", "dataclass", "large tuple"])
def test_a_shared_sub_config_holding_a_dependency_makes_every_step_that_uses_it_depend_on_it(shape):
    """The encoder memoises shared sub-configs (dataclasses, large containers), but never one
    holding a placeholder: each step that holds it must register the dependency (and wait for it)."""
    source = ExecutorStep("source", fn, Inner())
    shared = {"small tuple": (output_path_of(source), "x"), "dataclass": Inner(0.5, (output_path_of(source),)),
              "large tuple": (output_path_of(source),) + ("x",) * 20}[shape]
    users = [ExecutorStep(f"user{i}", fn, Outer(a=shared)) for i in range(3)]
    graph = build_graph(users)
    assert [graph.nodes[graph.digest_of(u)].deps for u in users] == [(graph.digest_of(source),)] * 3


def _class_with_odd_field_names() -> type:
    """A dataclass whose field names are not Python names ('a-b') or are keywords ('class'): dataclasses
    accepts them in a class without a generated __init__, and the encoder reads them all the same."""
    namespace = {"__annotations__": {"a-b": int, "class": str, "plain": float}, "a-b": 1, "class": "x", "plain": 0.5}
    return dataclasses.dataclass(frozen=True, init=False, repr=False, eq=False)(type("OddNames", (), namespace))


OddNames = _class_with_odd_field_names()


def test_fields_whose_names_are_not_python_names_encode_as_the_reference_does():
    changed = OddNames()
    for name, value in (("a-b", [2, 3]), ("class", "y")):
        object.__setattr__(changed, name, value)
    for config in (OddNames(), changed):
        expected = reference.canonical_json(reference.encode_value(config, no_deps))
        assert CanonicalEncoder(no_deps).config_text(config) == expected
    assert '"a-b":[2,3],"class":"y"' in CanonicalEncoder(no_deps).config_text(changed)
