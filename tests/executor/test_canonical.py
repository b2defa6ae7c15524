"""Properties of the canonical encoding: what changes an id and what must not."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor import (ConfigEncodingError, ExecutorStep, execution_only, hashed_unless_default, mirrored,
                      output_path_of, prefix_path, secret, this_output_path)
from executor.core.canonical import CanonicalEncoder, encode_value
from executor.core.graph import build_graph

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                    st.floats(allow_nan=False), st.binary(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=5), inner, max_size=4)), max_leaves=12)


def no_deps(step):
    raise AssertionError("no dependencies expected")


def enc(value):
    return CanonicalEncoder(no_deps).config_text(value)


@given(st.dictionaries(st.text(max_size=6), values, max_size=6))
def test_dict_order_is_irrelevant(d):
    assert enc(d) == enc(dict(reversed(list(d.items()))))


@given(st.lists(values, min_size=1, max_size=5))
def test_tuples_and_lists_differ(items):
    assert enc(items) != enc(tuple(items))


@given(st.sets(st.integers(), max_size=8))
def test_sets_are_order_independent(s):
    assert enc(s) == enc(set(sorted(s, reverse=True))) == enc(frozenset(s))


def test_types_are_part_of_the_encoding():
    assert len({enc(1), enc(1.0), enc(True), enc("1"), enc(b"1"), enc([1]), enc((1,))}) == 7
    assert enc(0.1 + 0.2) != enc(0.3)
    assert enc(-0.0) != enc(0.0)


@dataclasses.dataclass(frozen=True)
class Cfg:
    a: int = 1
    b: str = "x"
    c: tuple = (1, 2)
    d: float = 0.5
    workers: int = execution_only(2)
    password: str = secret("hunter2")


def fn(config):
    return None


def digest(config, name="s"):
    return build_graph([ExecutorStep(name, fn, config)]).targets[0]


@settings(max_examples=50)
@given(st.sampled_from(["a", "b", "c", "d"]), st.data())
def test_any_hashed_field_changes_the_id(field_name, data):
    base = Cfg()
    strategies = {"a": st.integers(), "b": st.text(), "c": st.tuples(st.integers()), "d": st.floats(allow_nan=False)}
    new_value = data.draw(strategies[field_name].filter(lambda v: v != getattr(base, field_name)))
    assert digest(dataclasses.replace(base, **{field_name: new_value})) != digest(base)


@given(st.integers(min_value=0, max_value=64), st.text())
def test_execution_only_and_secret_fields_do_not_change_the_id(workers, password):
    assert digest(Cfg(workers=workers, password=password)) == digest(Cfg())


def test_secret_value_never_appears_in_the_identity():
    graph = build_graph([ExecutorStep("s", fn, Cfg(password="sup3r-s3cret"))])
    node = next(iter(graph.nodes.values()))
    assert b"sup3r-s3cret" not in node.identity_bytes


def test_name_and_code_version_change_the_id():
    assert digest(Cfg(), "a") != digest(Cfg(), "b")
    one = build_graph([ExecutorStep("s", fn, Cfg(), code_version="1")]).targets[0]
    assert one != digest(Cfg())


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass(frozen=True)
class Wide:
    value: object = None
    output_path: object = None


def test_supported_leaf_types_encode():
    for value in (Color.RED, pathlib.PurePosixPath("a/b"), {"k": {1, 2}}, b"\xff", None):
        digest(Wide(value))


@pytest.mark.parametrize("bad, type_name", [
    (lambda: None, "function"),
    (object(), "object"),
    ({1: "int key"}, "int"),
])
def test_unencodable_values_name_step_field_and_type(bad, type_name):
    @dataclasses.dataclass(frozen=True)
    class Outer:
        inner: Wide

    nested = {"schedule": [bad], "deep": [[1, {"a": (2, [bad])}]]}  # small containers inside containers
    with pytest.raises(ConfigEncodingError) as info:
        digest(Outer(Wide(nested if not isinstance(bad, dict) else bad)), name="train/x")
    message = str(info.value)
    assert "train/x" in message and type_name in message
    path = "inner.value.deep[0][1].a[1][0]" if not isinstance(bad, dict) else "inner.value[1]"
    assert f"`{path}`" in message


def test_numpy_arrays_are_rejected_with_a_fix():
    np = pytest.importorskip("numpy")
    with pytest.raises(ConfigEncodingError, match=r"ndarray.*convert it to a tuple"):
        digest(Wide(np.zeros(3)))
    # a 0-d array is a number of another library: the hint names the right plain type
    for value, kind in ((np.array(True), "bool"), (np.array(1.5, dtype=np.float32), "float"),
                        (np.array(3, dtype=np.int8), "int")):
        with pytest.raises(ConfigEncodingError, match=rf"value.*Convert it to a plain {kind} "):
            digest(Wide(value))


def test_a_step_object_in_a_config_points_to_output_path_of():
    dep = ExecutorStep("dep", fn, Wide())
    with pytest.raises(ConfigEncodingError, match="output_path_of"):
        digest(Wide(dep))


def test_dependencies_are_hashed_by_digest_not_path():
    dep_a = ExecutorStep("dep", fn, Wide(1, this_output_path()))
    dep_b = ExecutorStep("dep", fn, Wide(2, this_output_path()))
    user_a = ExecutorStep("user", fn, Wide(output_path_of(dep_a)))
    user_b = ExecutorStep("user", fn, Wide(output_path_of(dep_b)))
    assert build_graph([user_a]).targets != build_graph([user_b]).targets
    # the subpath is part of the identity
    sub = ExecutorStep("user", fn, Wide(output_path_of(dep_a, "x")))
    assert build_graph([sub]).targets != build_graph([user_a]).targets


class _Counted:
    """A value whose registered encoding counts how often the encoder reaches it."""

    calls = 0


@dataclasses.dataclass(frozen=True)
class _Shared:
    value: object


@dataclasses.dataclass(frozen=True)
class _Holder:
    seed: int
    held: object


def _counted_step_fn(config):
    return None


def test_shared_dataclasses_and_large_containers_are_encoded_once_per_graph():
    """canonical.py memoises shared sub-configs by identity: dataclasses and containers of
    MEMO_MIN_ITEMS or more items; a small container is encoded again where it appears."""
    from executor import register_encoding
    from executor.core.canonical import MEMO_MIN_ITEMS

    def encode(value):
        _Counted.calls += 1
        return "counted"

    from executor.core import encodings

    register_encoding(_Counted, encode)
    try:
        shared = {"dataclass": _Shared(_Counted()), "large": (_Counted(),) + ("x",) * (MEMO_MIN_ITEMS - 1),
                  "small": (_Counted(), "x"),
                  "large list in a dict": {"k": [_Counted()] + ["x"] * (MEMO_MIN_ITEMS - 1)},
                  "larger list in a dict": {"k": [_Counted()] + ["x"] * MEMO_MIN_ITEMS},
                  "small list in a list": [[_Counted(), "x"]],
                  "large list in a list": [[_Counted()] + ["x"] * (MEMO_MIN_ITEMS - 1)],
                  "larger list in a list": [[_Counted()] + ["x"] * MEMO_MIN_ITEMS],
                  "larger list": [_Counted()] + ["x"] * MEMO_MIN_ITEMS,
                  "large dict": {"k": _Counted(), **{f"k{i}": i for i in range(MEMO_MIN_ITEMS - 1)}},
                  "larger dict": {"k": _Counted(), **{f"k{i}": i for i in range(MEMO_MIN_ITEMS)}},
                  "small dict in a list": [{"k": _Counted()}], "small tuple in a dict": {"k": (_Counted(), "x")}}
        for kind, expected in (("dataclass", 1), ("large", 1), ("small", 50), ("large list in a dict", 1),
                               ("larger list in a dict", 1), ("small list in a list", 50),
                               ("large list in a list", 1), ("larger list in a list", 1), ("larger list", 1),
                               ("large dict", 1), ("larger dict", 1), ("small dict in a list", 50),
                               ("small tuple in a dict", 50)):
            _Counted.calls = 0
            build_graph([ExecutorStep(f"s{i}", _counted_step_fn, _Holder(i, shared[kind])) for i in range(50)])
            assert _Counted.calls == expected, kind
    finally:
        encodings._exact.pop(_Counted)  # a registration of this test's own type only


@dataclasses.dataclass(frozen=True)
class Added:
    """A class whose last four fields were added after its steps had outputs (hashed_unless_default)."""

    lr: float = 0.1
    rate: float = hashed_unless_default(0.0)
    dtype: str = hashed_unless_default("float32")
    steps: int = hashed_unless_default(1)
    unset: object = hashed_unless_default(None)
    nan: float = hashed_unless_default(float("nan"))
    big: int = hashed_unless_default(1000)


@pytest.mark.parametrize("name, value, left_out", [
    ("rate", 0.0, True), ("rate", -0.0, False), ("rate", 0, False), ("rate", 0.5, False), ("rate", -1.0, False),
    ("nan", float("nan"), True), ("nan", float("inf"), False),
    ("dtype", "float32", True), ("dtype", "bfloat16", False), ("dtype", "float3", False), ("dtype", None, False),
    ("steps", 1, True), ("steps", True, False), ("steps", 1.0, False), ("steps", 2, False), ("steps", 0, False),
    ("unset", None, True), ("unset", False, False), ("unset", "", False),
    ("dtype", "".join(["float", "32"]), True), ("big", int("1000"), True), ("big", 1001, False),  # equal, not the same object
])
def test_a_field_added_later_is_left_out_exactly_while_it_holds_its_default(name, value, left_out):
    """Out of the id while it holds its default (so ids made before it existed stay), hashed like
    any field otherwise: another value, an equal value of another type, -0.0 for 0.0."""
    fields = encode_value(Added(**{name: value}), no_deps)["fields"]
    expected = {"lr": {"float": "0.1"}} | ({} if left_out else {name: encode_value(value, no_deps)})
    assert fields == expected


NT = collections.namedtuple("NT", "b a")


@pytest.mark.parametrize("value, expected", [
    (prefix_path("raw/a"), {"prefix_path": "raw/a"}),
    (mirrored("gs://bucket/raw/corpus"), "gs://bucket/raw/corpus"),  # the logical URL, as the plain string
    (this_output_path("sub"), {"this_output": "sub"}), (this_output_path(), {"this_output": None}),
    (Color.RED, {"enum": "Color", "name": "RED"}),
    (b"\x00\xff", {"bytes": "00ff"}), (bytearray(b"\x01"), {"bytes": "01"}),
    (pathlib.PurePosixPath("a/b"), {"path": "a/b"}), (pathlib.PureWindowsPath("a\\b"), {"path": "a/b"}),
    (NT(1, 2), {"fields": {"a": 2, "b": 1}, "namedtuple": "NT"}),
    (frozenset({"b", "a"}), {"set": ["a", "b"]}), ({2, 1}, {"set": [1, 2]}),
    (datetime.timedelta(seconds=1), {"type": "datetime.timedelta", "value": {"tuple": [0, 1, 0]}}),
    (float("-inf"), {"float": "-inf"}), (None, None), (False, False), (10**30, 10**30),
])
def test_each_kind_of_value_has_its_documented_form(value, expected):
    """The forms the module docstring of executor/core/canonical.py lists, value by value, as
    canonical JSON text (keys sorted, no spaces)."""
    assert CanonicalEncoder(no_deps).config_text(value) == json.dumps(expected, sort_keys=True, separators=(",", ":"))
    assert encode_value([value], no_deps) == [expected]


@pytest.mark.parametrize("bad", [prefix_path("/abs"), prefix_path("a/../b"), mirrored("gs://bucket"),
                                 mirrored("raw/corpus")])
def test_a_prefix_path_or_mirrored_input_that_names_no_place_is_refused_at_its_field(bad):
    with pytest.raises(ConfigEncodingError, match=rf"step 's'.*`value`.*{type(bad).__name__[:6].lower()}"):
        digest(Wide(bad))


def test_every_step_holding_a_shared_mirrored_input_lists_it():
    """A sub-config holding a mirrored input is not memoised: each step that holds it is told."""
    shared = Wide(mirrored("gs://bucket/raw/corpus"))
    graph = build_graph([ExecutorStep(f"s{i}", fn, _Holder(i, shared)) for i in range(3)])
    assert [node.mirrored for node in graph.nodes.values()] == [("gs://bucket/raw/corpus",)] * 3


@dataclasses.dataclass(frozen=True)
class _Pair:
    a: object
    b: object


@pytest.fixture
def counted():
    """_Counted registered with an encoding that counts its calls; unregistered afterwards."""
    from executor import register_encoding
    from executor.core import encodings

    def encode(value):
        _Counted.calls += 1
        return "counted"

    register_encoding(_Counted, encode)
    _Counted.calls = 0
    yield
    encodings._exact.pop(_Counted)
    for clear in encodings._listeners:  # the caches that knew it as registered
        clear()


# One value of every kind each fast path dispatches on (str, int, float, None, bools, small and large
# lists, tuples and dicts, everything else), and where it sits in each fast path.
_EVERY_KIND = ["s", 3, 10**30, 0.5, None, True, False, [1, "x"], [[2]], ["y"] * 16, (1, 2.5), ("z",) * 16, {"k": 1},
               dict.fromkeys("abcdefghijklmnopq", 0), Color.RED, b"\x00", pathlib.PurePosixPath("a"),
               frozenset({1}), NT(1, 2), Wide(1), datetime.timedelta(1), this_output_path("x")]
_PLACES = {
    "list item": lambda spy, x: [spy, x],
    "tuple item": lambda spy, x: (spy, x),
    "dict value": lambda spy, x: {"a": spy, "b": x},
    "item of a small list in a list": lambda spy, x: [[spy, x]],
    "list in a dict value": lambda spy, x: {"a": spy, "b": [x]},
    "dataclass field": lambda spy, x: _Pair(spy, x),
    "list in a dataclass field": lambda spy, x: _Pair(spy, [x]),
    "tuple in a dataclass field": lambda spy, x: _Pair(spy, (x,)),
    "dict in a dataclass field": lambda spy, x: _Pair(spy, {"k": x}),
}


@pytest.mark.parametrize("place", _PLACES)
def test_a_valid_config_has_each_value_encoded_once(counted, place):
    """The fast paths encode again, child by child, only to name a field that cannot be encoded:
    in a valid config nothing is encoded twice (a fast path that failed on valid data would still
    give the right text, only slower). The counted value sits before the value under test."""
    for value in _EVERY_KIND:
        _Counted.calls = 0
        CanonicalEncoder(no_deps).config_text(_PLACES[place](_Counted(), value))
        assert _Counted.calls == 1, value


class Count(int):
    pass


class Ratio(float):
    pass


@pytest.mark.parametrize("value, kind", [(Count(3), "int"), (Ratio(0.5), "float")])
def test_a_subclass_of_a_plain_number_gets_a_plain_number_hint(value, kind):
    with pytest.raises(ConfigEncodingError, match=rf"`value`.*Convert it to a plain {kind} "):
        digest(Wide(value))


class Size(tuple):
    """A shape that is a tuple subclass, as torch.Size is: a 0-d tensor's shape is Size(), not ()."""


class ZeroDimTensor:
    """A 0-d tensor of another library (torch.tensor(0.5)'s shape is torch.Size([]), dtype kind f)."""

    shape = Size()
    dtype = type("dtype", (), {"kind": "f"})()


def test_a_zero_dimensional_value_whose_shape_is_a_tuple_subclass_gets_a_plain_number_hint():
    """Its shape equals () without being the empty tuple itself: still a number, not an array."""
    with pytest.raises(ConfigEncodingError, match=r"`value`.*Convert it to a plain float ") as refused:
        digest(Wide(ZeroDimTensor()))
    assert "Arrays are not hashed element by element" not in str(refused.value)


def _posing_as(plain: type) -> type:
    """A class whose metaclass makes it compare equal to (and hash as) `plain` without being it."""
    meta = type(f"PosingAs{plain.__name__}", (type,),
                {"__eq__": lambda cls, other: other is plain or other is cls, "__hash__": lambda cls: hash(plain)})
    return meta("Posing", (), {})


@pytest.mark.parametrize("plain", [str, int, float, bool])
def test_a_class_that_only_compares_equal_to_a_plain_type_is_refused_at_its_field(plain):
    """Plain values are told apart by identity (`type(v) is str`), never by ==: an impostor is refused
    with the usual hint, not hashed as a str, int, float or bool."""
    impostor = _posing_as(plain)()
    with pytest.raises(ConfigEncodingError, match=r"`value`.*Posing"):
        digest(Wide(impostor))


class _Refused:
    tries = 0


@pytest.fixture
def refused():
    """_Refused registered with an encoding that always fails, counting its tries; unregistered afterwards."""
    from executor import register_encoding
    from executor.core import encodings

    def refuse(value):
        _Refused.tries += 1
        raise ValueError("refused on purpose")

    register_encoding(_Refused, refuse)
    _Refused.tries = 0
    yield
    encodings._exact.pop(_Refused)
    for clear in encodings._listeners:
        clear()


@dataclasses.dataclass(frozen=True)
class _Level:
    before: object
    child: object


_NESTINGS = {  # how one level wraps the next, a sibling before it, and that level's part of the path
    "dataclasses": (lambda inner: _Level([1, 2], inner), ".child"),
    "dicts": (lambda inner: {"a": [1, 2], "b": inner}, ".b"),
    "dicts and tuples": (lambda inner: {"a": 1, "b": ("x", inner)}, ".b[1]"),
}


@pytest.mark.parametrize("nesting", _NESTINGS)
@pytest.mark.parametrize("depth", [1, 6, 14])
def test_a_refused_value_nested_deep_is_tried_a_few_times_at_any_depth_and_named_at_its_field(refused, nesting,
                                                                                               depth):
    """Each container the fast path refused is encoded again child by child to name the failing
    field; a child container whose own retry already named it is not encoded again, so the refused
    value is tried a few times at any depth, never 2**depth times, and its whole path is named."""
    wrap, step = _NESTINGS[nesting]
    config = refused_value = _Refused()
    for _ in range(depth):
        config = wrap(config)
    with pytest.raises(ConfigEncodingError, match="refused on purpose") as info:
        digest(Wide(config), name="train/deep")
    error = info.value
    assert (error.step, error.field_path, error.value) == ("train/deep", "value" + step * depth, refused_value)
    # The fast path and the retry that names it; twice more where a dataclass's fast path wrote a
    # small dict inline (that dict is then encoded on its own: its fast path, its retry).
    assert _Refused.tries <= 4
