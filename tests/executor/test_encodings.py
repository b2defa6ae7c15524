"""The encoding registry (issue 18) and the canonical items of issue 12: library values in configs."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import fractions
import pathlib
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest

from executor import ConfigEncodingError, ExecutorStep, register_encoding, this_output_path
from executor.core.canonical import CanonicalEncoder, encode_value
from executor.core.graph import build_graph

REPO = Path(__file__).resolve().parents[2]

# One test encodes a jax PartitionSpec in this process, importing JAX: the `jax` marker runs this file after
# those that do not import JAX (tests/conftest.py; in-process inline runs fork until then).
pytestmark = pytest.mark.jax


@dataclasses.dataclass(frozen=True)
class Holder:
    value: object = None


@dataclasses.dataclass(frozen=True)
class Outer:
    nested: Holder = Holder()


def fn(config):
    return None


def digest(value, name="s"):
    return build_graph([ExecutorStep(name, fn, Outer(Holder(value)))]).targets[0]


def encoded(value):
    return encode_value(value, lambda p: "0" * 64)


BUILT_IN = [
    datetime.timedelta(hours=1), datetime.timedelta(hours=1, microseconds=1),
    datetime.datetime(2026, 1, 2, 3, 4, 5), datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    datetime.date(2026, 1, 2), datetime.time(3, 4), datetime.timezone(datetime.timedelta(hours=2)),
    uuid.UUID(int=7), decimal.Decimal("1.10"), decimal.Decimal("1.1"), fractions.Fraction(1, 3), 1 + 2j, range(3),
    pathlib.PurePosixPath("a/b"),
]


@pytest.mark.parametrize("value", BUILT_IN, ids=repr)
def test_built_in_encodings_hash_everyday_values(value):
    assert digest(value) == digest(value)  # and it did not raise


def test_different_values_and_types_give_different_ids():
    ids = {digest(v) for v in BUILT_IN}
    assert len(ids) == len(BUILT_IN)
    # the type's name is part of the encoding: equal data of two types differ
    assert digest(datetime.date(2026, 1, 2)) != digest("2026-01-02")
    assert encoded(datetime.timedelta(seconds=90)) == {"type": "datetime.timedelta", "value": {"tuple": [0, 90, 0]}}


def test_numpy_scalars_and_dtypes():
    np = pytest.importorskip("numpy")
    assert encoded(np.float32(1.5)) == {"type": "numpy.float32", "value": {"float": "1.5"}}
    assert encoded(np.bool_(True)) == {"type": "numpy.bool", "value": True}
    assert digest(np.int64(3)) != digest(3) != digest(np.int32(3))
    assert encoded(np.dtype("float32"))["type"] == "numpy.dtype"
    assert digest(np.dtype("float32")) != digest(np.dtype("bfloat16") if hasattr(np, "bfloat16") else np.dtype("float16"))
    assert encoded(np.float32) == {"type": "numpy.scalar_type", "value": "float32"}  # a dtype given as its class


def test_a_numpy_scalar_type_is_encoded_when_it_is_the_first_numpy_value_met(monkeypatch):
    """A dtype given as its class (`np.float32`) in a config that holds no other numpy value: the
    class itself must load numpy's encodings. The registry is set back to before numpy's were
    loaded, as in a fresh process (the tests before this one met numpy values)."""
    np = pytest.importorskip("numpy")
    from executor.core import encodings

    monkeypatch.setattr(encodings, "_loaded", encodings._loaded - {"_register_numpy", "_register_ml_dtypes"})
    monkeypatch.setattr(encodings, "_constants", {})
    monkeypatch.setattr(encodings, "_exact", dict(encodings._exact))
    monkeypatch.setattr(encodings, "_with_subclasses", dict(encodings._with_subclasses))
    assert encoded({"dtype": np.float32}) == {"dict": {"dtype": {"type": "numpy.scalar_type", "value": "float32"}}}


JAX_CONFIG = """
import dataclasses, datetime, pathlib, sys
from executor.core.graph import build_graph
from executor import ExecutorStep
assert "jax" not in sys.modules
build_graph([ExecutorStep("plain", print, {"a": datetime.timedelta(1)})])
assert "jax" not in sys.modules, "encoding a config without jax values must not import jax"
from jax.sharding import PartitionSpec as P
import jax.numpy as jnp
@dataclasses.dataclass(frozen=True)
class Mesh:
    axis: object
    dtype: object
    every: object
    out: object
g = build_graph([ExecutorStep("m", print, Mesh(P("data", None, ("x", "y")), jnp.bfloat16, datetime.timedelta(minutes=5),
                                                pathlib.Path("runs.txt")))])
other = build_graph([ExecutorStep("m", print, Mesh(P("data", None, "x"), jnp.bfloat16, datetime.timedelta(minutes=5),
                                                    pathlib.Path("runs.txt")))])
node = next(iter(g.nodes.values()))
fields = node.identity["config"]["fields"]
assert fields["axis"]["type"] == "jax.sharding.PartitionSpec", fields["axis"]
assert fields["dtype"] == {"type": "jax.numpy.scalar_type", "value": "bfloat16"}, fields["dtype"]
assert g.targets != other.targets
print("ok")
"""


def test_jax_partition_spec_is_encoded_and_jax_is_imported_only_when_a_config_holds_it():
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, "-c", JAX_CONFIG], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


class Money:
    def __init__(self, currency: str, cents: int):
        self.currency, self.cents = currency, cents


def test_an_unregistered_type_names_step_field_and_how_to_register():
    with pytest.raises(ConfigEncodingError) as info:
        digest(Money("EUR", 5), name="train/x")
    message = str(info.value)
    for part in ("train/x", "nested.value", f"{__name__}.Money", "register_encoding(", "execution_only"):
        assert part in message, (part, message)


def test_registering_a_type_makes_it_hashable_and_its_name_part_of_the_id():
    class Price(Money):
        pass

    register_encoding(Money, lambda m: (m.currency, m.cents))
    try:
        assert digest(Money("EUR", 5)) == digest(Money("EUR", 5)) != digest(Money("EUR", 6))
        # by its qualname, not its module (issue 44: moving the class keeps ids)
        assert encoded(Money("EUR", 5)) == {"type": "Money", "value": {"tuple": ["EUR", 5]}}
        with pytest.raises(ConfigEncodingError, match="Price"):  # exact type unless subclasses=True
            digest(Price("EUR", 5))
        register_encoding(Money, lambda m: (m.currency, m.cents), name="shop.Money", subclasses=True)
        assert encoded(Price("EUR", 5)) == {"type": "shop.Money", "value": {"tuple": ["EUR", 5]}}
    finally:
        from executor.core import encodings

        encodings._exact.pop(Money, None)
        encodings._with_subclasses.pop(Money, None)
        encodings.register_encoding(str, str)  # any registration clears the encoder's caches
        encodings._exact.pop(str)


@dataclasses.dataclass(frozen=True)
class PairDefault:
    pair: tuple = (1, 2)


def test_a_registration_applies_to_defaults_already_encoded():
    """The encoder encodes a constant default once per dataclass; a registration must redo it."""
    from executor.core import encodings

    assert encoded(PairDefault()) == {"dataclass": "PairDefault",
                                      "fields": {"pair": {"tuple": [1, 2]}}}
    register_encoding(tuple, list, name="pair")
    try:
        assert encoded(PairDefault()) == {"dataclass": "PairDefault",
                                          "fields": {"pair": {"type": "pair", "value": [1, 2]}}}
    finally:
        encodings._exact.pop(tuple)
        encodings.register_encoding(str, str)  # any registration clears the encoder's caches
        encodings._exact.pop(str)
    assert encoded(PairDefault())["fields"]["pair"] == {"tuple": [1, 2]}


def test_a_registered_encoding_that_returns_no_config_data_is_named():
    class Odd:
        pass

    register_encoding(Odd, lambda o: object())
    try:
        with pytest.raises(ConfigEncodingError, match=r"nested\.value.*registered encoding.*must return plain config data; "
                                                      r"it returned a object \(Say how it becomes canonical data"):
            digest(Odd())
    finally:
        from executor.core import encodings

        encodings._exact.pop(Odd)


def test_a_registered_encoding_that_raises_is_reported_at_the_field_that_used_it():
    class Fragile:
        pass

    def encode(value):
        raise ValueError("no currency")

    register_encoding(Fragile, encode)
    try:
        with pytest.raises(ConfigEncodingError,
                           match=r"nested\.value.*registered encoding \(.*Fragile\) failed: ValueError: no currency"):
            digest(Fragile())
    finally:
        from executor.core import encodings

        encodings._exact.pop(Fragile)


# -- issue 12: namedtuples, cycles, numbers of other libraries, lone surrogates ----------------------------
NT = collections.namedtuple("NT", "a b")
NT2 = collections.namedtuple("NT2", "a b")


class Typed(NamedTuple):
    a: int
    b: int


def test_namedtuple_types_are_part_of_the_identity():
    ids = {digest(NT(1, 2)), digest(NT2(1, 2)), digest((1, 2)), digest(Typed(1, 2))}
    assert len(ids) == 4
    assert digest(NT(1, 2)) != digest(NT(2, 1))
    assert encoded(NT(1, 2)) == {"namedtuple": "NT", "fields": {"a": 1, "b": 2}}


def test_a_config_list_that_contains_itself_is_a_clear_error():
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(ConfigEncodingError, match=r"step 's'.*`nested\.value\[1\]`.*contains itself"):
        digest(loop)
    d: dict = {}
    d["me"] = {"again": d}
    with pytest.raises(ConfigEncodingError, match=r"contains itself"):
        digest(d)


def test_a_bool_like_number_of_another_library_gets_a_bool_hint():
    np = pytest.importorskip("numpy")
    with pytest.raises(ConfigEncodingError, match="Convert it to a plain bool"):
        digest(np.array(True))


def test_a_lone_surrogate_names_step_and_field():
    bad = "file-\udcff.txt"  # what os.fsdecode gives for an undecodable byte
    with pytest.raises(ConfigEncodingError, match=r"step 's'.*`nested\.value\.name`.*lone surrogate"):
        digest({"name": bad})
    with pytest.raises(ConfigEncodingError, match=r"step 's'.*code_version.*lone surrogate"):
        build_graph([ExecutorStep("s", fn, Outer(), code_version=bad)])
    with pytest.raises(ConfigEncodingError, match=r"step 's'.*`nested\.value\.files\['\{\}'\]`.*lone surrogate"):
        digest({"files": frozenset({"ok.txt", bad})})  # inside a set, too
    with pytest.raises(ConfigEncodingError, match=r"step 's'.*`nested\.value\.files\['file-\\udcff\.txt'\]`.*lone surrogate"):
        digest({"files": {bad: 1}})  # a dict key
    with pytest.raises(ConfigEncodingError, match=r"step 's'.*`nested\.value\.out\.sub`.*lone surrogate"):
        digest({"out": this_output_path(bad)})  # the subpath of a placeholder


_BAD = "file-\udcff.txt"


@pytest.mark.parametrize("value, path", [
    (["ok", _BAD], "nested.value[1]"), (("ok", _BAD), "nested.value[1]"), (NT("ok", _BAD), "nested.value[1]"),
    ({"a": ["ok", {"b": ("ok", _BAD)}]}, "nested.value.a[1].b[1]"), (Holder(_BAD), "nested.value.value"),
    (frozenset({("ok", _BAD)}), "nested.value['{}'][1]"),
])
def test_a_lone_surrogate_is_named_in_every_kind_of_container(value, path):
    with pytest.raises(ConfigEncodingError, match=rf"step 's'.*`{re.escape(path)}`.*lone surrogate"):
        digest(value)


_HUGE = 10 ** 5000  # more digits than Python writes out by default (sys.get_int_max_str_digits())


@pytest.mark.parametrize("value, path", [
    (_HUGE, "nested.value"), ([1, _HUGE], "nested.value[1]"), ((1, _HUGE), "nested.value[1]"),
    (NT(1, _HUGE), "nested.value.b"), ({"a": {"b": _HUGE}}, "nested.value.a.b"), (Holder(_HUGE), "nested.value.value"),
    (frozenset({_HUGE}), "nested.value['{}']"),
], ids=["field", "list", "tuple", "namedtuple", "dict", "dataclass", "set"])
def test_an_int_too_long_to_write_names_step_field_and_what_to_do(value, path):
    """Python refuses to write an int of more than 4,300 digits as text: the error names the step,
    the field and the size, and says to store it as a str or bytes (no bare ValueError)."""
    with pytest.raises(ConfigEncodingError, match=rf"step 's'.*`{re.escape(path)}`.*an unprintable int.*"
                                                  rf"{_HUGE.bit_length()} bits.*store it as a str or as bytes"):
        digest(value)


def test_a_chain_deeper_than_the_recursion_limit_is_digested():
    steps = [ExecutorStep("c0", fn, Outer())]
    for i in range(1, sys.getrecursionlimit() * 2):
        from executor import output_path_of

        steps.append(ExecutorStep(f"c{i}", fn, Outer(Holder(output_path_of(steps[-1])))))
    graph = build_graph([steps[-1]])
    assert len(graph.nodes) == len(steps)
    assert list(graph.nodes)[0] == graph.digest_of(steps[0])  # dependencies first


def test_a_dependency_cycle_through_a_deep_chain_is_named():
    from executor import output_path_of

    @dataclasses.dataclass
    class Mutable:
        dep: object = None

    first = ExecutorStep("c0", fn, Mutable())
    steps = [first]
    for i in range(1, 100):
        steps.append(ExecutorStep(f"c{i}", fn, Mutable(output_path_of(steps[-1]))))
    first.config.dep = output_path_of(steps[-1])  # close the loop
    from executor import GraphError

    with pytest.raises(GraphError, match=r"dependency cycle: .*c99 -> .*c0"):
        build_graph([steps[-1]])


def test_encoder_memo_does_not_leak_between_graphs():
    shared = [1, 2]
    first = build_graph([ExecutorStep("s", fn, Outer(Holder(shared)))]).targets
    shared.append(3)  # mutated between two builds: the second build sees it
    assert build_graph([ExecutorStep("s", fn, Outer(Holder(shared)))]).targets != first
    assert CanonicalEncoder(lambda p: "").config_text(shared) == "[1,2,3]"


def test_a_config_with_a_partition_spec_a_timedelta_and_a_path_runs_and_is_then_skipped(tmp_path):
    pytest.importorskip("jax")
    script = str(REPO / "tests/executor/library_values_experiment.py")
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    ran = subprocess.run([sys.executable, script, str(tmp_path), "run"], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "P('data', None) 0:05:00 corpus/a.txt"
    planned = subprocess.run([sys.executable, script, str(tmp_path), "plan"], capture_output=True, text=True,
                             env=env, cwd=REPO, timeout=300)
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert planned.stdout.strip().splitlines()[-1] == "skip"  # the same id in a second process
