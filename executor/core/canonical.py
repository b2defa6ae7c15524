"""Config -> canonical bytes. Pure: no I/O, no environment, no hash seeds.

Every value is encoded with its type, so 1 and 1.0, lists and tuples, str and bytes differ. The
result is canonical JSON (sorted keys, no spaces): `null`/`true`/ints/strings as themselves,
`[...]` for lists, and one-key objects for the rest — {"float": repr}, {"bytes": hex},
{"tuple": [...]}, {"dict": {...}}, {"set": [sorted]}, {"path": posix}, {"enum": T, "name": N},
{"dataclass": T, "fields": {...}}, {"fields": {...}, "namedtuple": T}, {"type": T, "value": V}
(a registered encoding, see encodings.py), {"dependency": digest, "sub": S} (a Merkle tree over
digests, never paths, so ids do not depend on the prefix), {"this_output": S} and
{"prefix_path": P}; a mirrored input is its logical URL, as a plain string. T is the class's
`__qualname__`, without the module that defines it (DESIGN §10: moving code keeps ids; a class
is its name and fields). Execution-only fields are left out. `legacy_ids.py` subclasses the
encoder with the module-qualified names ids were made of before, for carrying old outputs over.

The encoder writes the JSON text directly rather than building the structure and dumping it, and
memoises the text of dataclasses and large containers that several steps share (the same optimizer
config object in 10,000 steps is encoded once), and of each dataclass field's constant default and
default_factory value: planning a large graph is mostly this function. It walks the same structure
as tree.fold, and tests hold the two to the same answer. A `hashed_unless_default` field (one added
to a class whose steps already have outputs) is left out while it holds its default, so ids made
before it existed stay.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import keyword
import pathlib
import sys
from typing import Any, Callable

from executor.core import encodings
from executor.core.errors import ConfigEncodingError
from executor.core.step import (ExecutorStep, MirroredPath, OutputPathOf, PrefixPath, TaggedOutput, ThisOutputPath,
                                 is_execution_only, omitted_defaults)
from executor.core.tree import format_path, kept_field_names

DigestOf = Callable[[OutputPathOf], str]  # dependency placeholder -> its full digest
TagOf = Callable[[TaggedOutput], "str | None"]  # tag placeholder -> the tagged digest (None: no such tag)

_string = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) writes for a str


def is_hashed_field(f: dataclasses.Field) -> bool:
    return not is_execution_only(f)


class _Unencodable(Exception):
    """Raised inside the encoder, always with a hint (how to fix it); containers add their key to
    `path` on the way out."""

    def __init__(self, value: Any, hint: str):
        super().__init__()
        self.value, self.hint, self.path = value, hint, []


# What a value of a given type is, decided once per type.
(_DATACLASS, _NAMEDTUPLE, _LIST, _TUPLE, _DICT, _SET, _ENUM, _BYTES, _PATH, _DEPENDENCY, _THIS_OUTPUT,
 _PREFIX_PATH, _MIRRORED, _REGISTERED, _OTHER, _SCALAR, _TAG) = range(17)
_SCALARS = frozenset({str, int, float, bool, type(None)})  # exactly these types, not their subclasses
_kinds: dict[type, int] = {}
encodings.on_change(_kinds.clear)


# Sub-configs memoised by identity: dataclasses, and containers of at least this many items (a
# shared list of 1,000 data files). A small list costs less to encode again than to look up and keep.
MEMO_MIN_ITEMS = 16


def _kind(t: type) -> int:
    kind = _kinds.get(t)
    if kind is None:
        kind = _kinds[t] = _classify(t)
    return kind


def _classify(t: type) -> int:
    if t in _SCALARS:
        return _SCALAR
    if t in encodings._exact:
        return _REGISTERED
    if dataclasses.is_dataclass(t) and not issubclass(t, (OutputPathOf, ThisOutputPath, PrefixPath, MirroredPath,
                                                                TaggedOutput, ExecutorStep)):
        return _DATACLASS
    if issubclass(t, tuple) and hasattr(t, "_fields"):
        return _NAMEDTUPLE
    for base, kind in ((list, _LIST), (tuple, _TUPLE), (dict, _DICT), ((set, frozenset), _SET),
                       (enum.Enum, _ENUM), ((bytes, bytearray), _BYTES), (pathlib.PurePath, _PATH),
                       (OutputPathOf, _DEPENDENCY), (ThisOutputPath, _THIS_OUTPUT), (PrefixPath, _PREFIX_PATH),
                       (MirroredPath, _MIRRORED), (TaggedOutput, _TAG)):
        if issubclass(t, base):
            return kind
    return _REGISTERED if encodings.lookup(t) is not None else _OTHER


def type_name(t: type) -> str:
    """What identities name a class by: its qualified name inside its module, not the module."""
    return t.__qualname__


def _float(v: float) -> str:
    return f'{{"float":"{v!r}"}}'  # the shortest text that reads back; 'inf', 'nan' as such (v is a float)


class CanonicalEncoder:
    """Canonical JSON text of configs. Use one per graph build: it memoises the text of shared
    sub-configs by object identity, which is only sound while the configs are not mutated."""

    # How classes are named: replaced by legacy_ids.LegacyEncoder, with its own compiled encoders.
    type_name = staticmethod(type_name)
    dataclass_encoders: dict[type, Callable[[Any, Callable[[Any], str]], str]] = {}

    def __init__(self, digest_of: DigestOf, on_mirrored: Callable[[MirroredPath], None] | None = None,
                 tag_of: TagOf | None = None):
        self.digest_of = digest_of
        self.tag_of = tag_of  # output_of_tag(...) -> the tagged digest, read from the prefix at planning
        self.on_mirrored = on_mirrored  # told of each mirrored input encoded (the graph notes them per step)
        self._memo: dict[int, tuple[Any, str]] = {}  # id(container) -> (container, text); keeps it alive
        self._dependencies = 0  # placeholders encoded so far: sub-configs holding one are not memoised
        # id(container) -> (container, its error's value, hint and path below it), for containers
        # whose field-by-field retry found the failing child: see _field_again.
        self._failed: dict[int, tuple[Any, Any, str, tuple]] = {}

    def config_text(self, config: Any, step_name: str | None = None) -> str:
        """The canonical JSON text of a config; errors name the step and the field path."""
        try:
            return self.text(config)
        except _Unencodable as e:
            path = tuple(reversed(e.path))
            raise ConfigEncodingError(step_name, format_path(path), e.value, e.hint) from None
        except RecursionError:
            raise _nesting_error(config, step_name) from None

    def text(self, v: Any) -> str:
        t = type(v)
        kind = _kinds.get(t)  # first: the encoders write str/int/float items themselves, so most values here are not
        if kind is None:
            kind = _kind(t)
        if kind == _SCALAR:
            if t is str:
                return _string(v)
            if t is int:
                try:
                    return str(v)  # of an int exactly: str() is its repr, and the fastest call to it
                except ValueError:  # more digits than Python writes (sys.get_int_max_str_digits())
                    raise _Unencodable(v, _long_int_hint(v)) from None
            if t is float:
                return _float(v)
            if t is bool:
                return "true" if v else "false"
            if v is None:
                return "null"
            # A class whose metaclass makes it compare equal to a plain type without being one.
            raise _Unencodable(v, _hint(v, t))
        if kind <= _SET:
            if kind != _DATACLASS and len(v) < MEMO_MIN_ITEMS:
                return self._container(v, t, kind)
            memo = self._memo.get(id(v))
            if memo is not None:
                return memo[1]
            before = self._dependencies
            text = self._container(v, t, kind)
            if self._dependencies == before:
                self._memo[id(v)] = (v, text)
            return text
        if kind == _DEPENDENCY:
            self._dependencies += 1
            sub = "null" if v.sub is None else _string(v.sub)
            return f'{{"dependency":"{self.digest_of(v)}","sub":{sub}}}'
        if kind == _THIS_OUTPUT:
            return '{"this_output":' + ("null" if v.sub is None else _string(v.sub)) + "}"
        if kind == _ENUM:
            return f'{{"enum":{_string(self.type_name(t))},"name":{_string(v.name)}}}'
        if kind == _BYTES:
            return f'{{"bytes":"{bytes(v).hex()}"}}'
        if kind == _PATH:
            return '{"path":' + _string(v.as_posix()) + "}"
        if kind == _PREFIX_PATH:  # the relative path only: ids never depend on the prefix
            if v.problem:
                raise _Unencodable(v, v.problem)
            return '{"prefix_path":' + _string(v.path) + "}"
        if kind == _MIRRORED:  # the logical URL as a plain string: ids never depend on the source bucket
            if v.problem:
                raise _Unencodable(v, v.problem)
            self._dependencies += 1  # a sub-config holding one is not memoised: each step that reads it is told
            if self.on_mirrored is not None:
                self.on_mirrored(v)
            return _string(v.url)
        if kind == _REGISTERED:
            return self._registered(v, t)
        if kind == _TAG:
            return self._tag(v)
        return self._other(v, t)

    def _tag(self, v: TaggedOutput) -> str:
        """{"tag": name@version, "digest": D, "sub": S}: the tagged output's digest is hashed, so a
        moved tag is a changed id; the tag's name is kept so `explain` can say which tag moved."""
        digest = self.tag_of(v) if self.tag_of is not None else None
        if digest is None:
            hint = (f"no tag {v.tag!r} under the prefix: create it with `stepgraph tag STEP {v.tag}`, or list the "
                    f"tags with `stepgraph tags`" if self.tag_of is not None else
                    f"output_of_tag({v.tag!r}) is resolved from the prefix's tags when a plan is made "
                    f"(`ids` and `check` read no prefix)")
            raise _Unencodable(v, hint)
        self._dependencies += 1  # a sub-config holding one is not memoised
        sub = "null" if v.sub is None else _string(v.sub)
        return f'{{"digest":"{digest}","sub":{sub},"tag":{_string(v.tag)}}}'

    def _container(self, v: Any, t: type, kind: int) -> str:
        text = self.text
        try:
            if kind == _DATACLASS:
                encode = self.dataclass_encoders.get(t)
                if encode is None:
                    encode = self.dataclass_encoders[t] = _compile_dataclass_encoder(t, self.type_name)
                return encode(v, text)
            if kind == _LIST:
                return _sequence_text(v, text, "[", "]")
            if kind == _TUPLE:
                return _sequence_text(v, text, '{"tuple":[', "]}")
            if kind == _DICT:
                return _dict_text(v, text)
        except (_Unencodable, TypeError, ValueError):  # ValueError: an item is an int too long to write
            try:
                self._raise_at_failing_child(v, t, kind)
            except _Unencodable as e:
                self._failed[id(v)] = (v, e.value, e.hint, tuple(e.path))
                raise
            raise  # no child fails alone (never seen): the fast path's own error stands
        if kind == _NAMEDTUPLE:
            items = ",".join([_string(name) + ":" + self._field(x, name)
                              for name, x in sorted(zip(t._fields, v), key=lambda item: item[0])])
            return '{"fields":{' + items + '},"namedtuple":' + _string(self.type_name(t)) + "}"
        return '{"set":[' + ",".join(sorted([self._field(x, "{}") for x in v])) + "]}"

    def _field(self, x: Any, key: Any) -> str:
        try:
            return self.text(x)
        except _Unencodable as e:
            e.path.append(key)
            raise

    def _field_again(self, x: Any, key: Any) -> str:
        """_field, for a retry: a child container whose own retry already named the failing value
        raises that error again at once. Encoding it a second time would retry it again too, which
        doubles the work at each level of nesting (2**depth tries of a value nested depth deep)."""
        failed = self._failed.get(id(x))
        if failed is None or failed[0] is not x:
            return self._field(x, key)
        error = _Unencodable(failed[1], failed[2])
        error.path = [*failed[3], key]
        raise error

    def _raise_at_failing_child(self, v: Any, t: type, kind: int) -> None:
        """Encode a container its fast path refused again, one child at a time and in the same
        order, so that the child that fails raises with its key (field, index or dict key) on the
        error's path. The fast paths only fail where a child fails: this never returns text."""
        field = self._field_again
        if kind == _DATACLASS:
            for name, _ in _dataclass_layout(t, self.type_name, v)[1]:
                field(getattr(v, name), name)
        elif isinstance(v, dict):
            for k in v:
                if not isinstance(k, str):
                    error = _Unencodable(k, "Dict keys in configs must be strings.")
                    error.path.append(k)
                    raise error
            for k in sorted(v):
                field(v[k], k)
        else:
            for i, x in enumerate(v):
                field(x, i)

    def _registered(self, v: Any, t: type) -> str:
        entry = encodings.lookup(t)
        assert entry is not None
        try:
            data = entry.encode(v)
        except Exception as e:  # noqa: BLE001 - a broken encoder is reported at the field that used it
            raise _Unencodable(v, f"Its registered encoding ({entry.name}) failed: {type(e).__name__}: {e}") from None
        try:
            value = self.text(data)
        except _Unencodable as e:
            e.hint = (f"The registered encoding of {entry.name} must return plain config data; "
                      f"it returned a {type(e.value).__qualname__} ({e.hint})")
            e.value, e.path = v, []
            raise
        return f'{{"type":{_string(self.registered_name(entry))},"value":{value}}}'

    @staticmethod
    def registered_name(entry: encodings.Encoding) -> str:
        return entry.name

    def _other(self, v: Any, t: type) -> str:
        if isinstance(v, ExecutorStep):
            raise _Unencodable(v, f"Refer to another step's output with output_path_of({v.name!r} step).")
        found = encodings.constant(v)
        if found is None and isinstance(v, type) and encodings.load_lazy(v.__module__):
            found = encodings.constant(v)
        if found is not None:
            name, data = found
            return f'{{"type":{_string(name)},"value":{self.text(data)}}}'
        raise _Unencodable(v, _hint(v, t))


def _long_int_hint(v: int) -> str:
    return (f"It is an int of {v.bit_length()} bits, more than the {sys.get_int_max_str_digits()} decimal digits "
            "Python writes out (sys.get_int_max_str_digits()); store it as a str or as bytes instead.")


def _sequence_text(v: Any, text: Callable[[Any], str], head: str, tail: str) -> str:
    """A list's or tuple's text between `head` and `tail`: str/int/float items without a call to
    text(). Errors propagate: the enclosing container encodes again, naming the item."""
    return head + ",".join([_string(x) if (k := type(x)) is str else str(x) if k is int
                            else _float(x) if k is float
                            else _sequence_text(x, text, "[", "]") if k is list and len(x) < MEMO_MIN_ITEMS
                            else text(x) for x in v]) + tail


def _dict_text(v: Any, text: Callable[[Any], str]) -> str:
    """A dict's text, keys sorted (a key that is not a str fails in _string: TypeError). Its values
    are dispatched as _sequence_text's items, written out again: one shared helper for both cost a
    tenth of all encoding (callgrind: 727 -> 808 M instructions per pass over the 10k bench's configs)."""
    return '{"dict":{' + ",".join([_string(key) + ":" + (
        _string(x) if (k := type(x := v[key])) is str else str(x) if k is int
        else _float(x) if k is float
        else _sequence_text(x, text, "[", "]") if k is list and len(x) < MEMO_MIN_ITEMS
        else text(x)) for key in sorted(v)]) + "}}"


def _holds_default(value: Any, default: Any) -> bool:
    """Whether `value` would encode as `default` does (1, 1.0 and True differ; so do 0.0 and -0.0)."""
    if type(value) is not type(default):
        return False
    return _float(value) == _float(default) if type(value) is float else value == default


def _dataclass_layout(t: type, name_of: Callable[[type], str], v: Any = None) -> tuple[str, list[tuple[str, str]]]:
    """The text before the fields, and (field name, '"name":') for each hashed field, sorted; with
    an instance `v`, without its `hashed_unless_default` fields that hold their default."""
    names = sorted(kept_field_names(t, is_hashed_field))
    if v is not None:
        omitted = omitted_defaults(t)
        names = [n for n in names if not (n in omitted and _holds_default(getattr(v, n), omitted[n]))]
    return ('{"dataclass":' + _string(name_of(t)) + ',"fields":{',
            [(name, ("," if i else "") + _string(name) + ":") for i, name in enumerate(names)])


encodings.on_change(CanonicalEncoder.dataclass_encoders.clear)  # their defaults' texts: the old registry


def _compile_dataclass_encoder(t: type, name_of: Callable[[type], str]) -> Callable[[Any, Callable[[Any], str]], str]:
    """A function `(instance, text) -> canonical text` specialised to the dataclass `t`, named by `name_of`.

    Generated, as dataclasses generates __init__, because it runs once per step config and shared
    sub-config: attribute reads, the str/int/float/None/bool cases without a call to text(), small
    plain lists, tuples and dicts without its dispatch, one join, no loop.
    A field that still holds its default object, when no instance can change that object (see
    _is_constant), is its text encoded once: most fields of a large config keep their defaults. A
    field whose value is exactly what its default_factory makes (a fresh list or dict per instance)
    is that value's text too, found by a generated comparison (_factory_templates).
    """
    if omitted_defaults(t):  # which fields are hashed depends on the instance: no fixed layout
        def encode_instance(v: Any, text: Callable[[Any], str]) -> str:
            head, keys = _dataclass_layout(t, name_of, v)
            return head + "".join([key + text(getattr(v, name)) for name, key in keys]) + "}}"
        return encode_instance
    head, keys = _dataclass_layout(t, name_of)
    defaults = {f.name: f.default for f in dataclasses.fields(t) if _is_constant(f.default)}
    made = _factory_templates(t)
    namespace: dict[str, Any] = {"S": _string, "F": _float, "Q": _sequence_text, "M": _dict_text,
                                 "MISSING": _MISSING, "N": MEMO_MIN_ITEMS, "LH": "[", "LT": "]", "TH": '{"tuple":[',
                                 "TT": "]}"}
    pieces = []
    for i, (name, key) in enumerate(keys):
        pieces.append(repr((head if i == 0 else "") + key))
        read = f"v.{name}" if name.isidentifier() and not keyword.iskeyword(name) else f"getattr(v, {name!r})"
        if name in defaults:  # x read in the test: the dispatch below types the value already read
            namespace[f"D{i}"] = defaults[name]
            namespace[f"T{i}"] = CanonicalEncoder(_no_dependencies).text(defaults[name])
            test, typed = f"T{i} if (x := {read}) is D{i} else ", "type(x)"
        elif name in made:  # a fresh copy of its default_factory's value: the same text, checked exactly
            namespace[f"T{i}"] = CanonicalEncoder(_no_dependencies).text(made[name])
            test, typed = f"T{i} if ({_same_as(made[name], read, 'x', [0])}) else ", "type(x)"
        else:
            test, typed = "", f"type(x := {read})"
        pieces.append(f"({test}S(x) if (k := {typed}) is str else str(x) if k is int "
                      f"else F(x) if k is float else 'null' if x is None "
                      f"else 'true' if x is True else 'false' if x is False "
                      # small plain containers without text()'s dispatch; large ones are memoised there
                      f"else Q(x, text, LH, LT) if k is list and len(x) < N "
                      f"else Q(x, text, TH, TT) if k is tuple and len(x) < N "
                      f"else M(x, text) if k is dict and len(x) < N else text(x))")
    pieces.append(repr(("" if keys else head) + "}}"))
    source = f"def encode(v, text):\n    return ''.join(({', '.join(pieces)},))\n"
    exec(compile(source, f"<canonical encoder of {name_of(t)}>", "exec"), namespace)  # noqa: S102
    return namespace["encode"]


# A default_factory value is matched exactly (each item's type and value) by generated code only
# while it is this small: a larger one is encoded as any other value.
TEMPLATE_MAX_ITEMS = 32
_MISSING = object()  # what a template's dict lookup finds for an absent key: no item is it


def _factory_templates(t: type) -> dict[str, Any]:
    """Field name -> the value its default_factory makes, for factories that make small plain data
    (str/int/bool/None in lists, tuples and str-keyed dicts; a list or dict each instance gets anew).

    The encoder then writes such a field's text without encoding it when the instance's value is
    exactly that data (_same_as). The factory is called once per class encoded (dataclasses call it
    for every instance); the value only serves as a pattern to compare with, so a factory that makes
    something else later costs a comparison, never a wrong text. A factory that fails is left alone."""
    made: dict[str, Any] = {}
    for f in dataclasses.fields(t):
        if f.default_factory is dataclasses.MISSING or f.name not in kept_field_names(t, is_hashed_field):
            continue
        try:
            value = f.default_factory()
        except Exception:  # noqa: BLE001 - a factory that needs something: no template, nothing else changes
            continue
        if _template_size(value) <= TEMPLATE_MAX_ITEMS:
            made[f.name] = value
    return made


def _template_size(value: Any) -> float:
    """How many items `value` holds if it is plain data a template can match; inf if it is not."""
    t = type(value)
    if t is str or t is bool or value is None or (t is int and value.bit_length() <= 64):
        return 1
    if t in (list, tuple):
        return 1 + sum(_template_size(x) for x in value)
    if t is dict and all(type(k) is str for k in value):
        return 1 + sum(_template_size(x) for x in value.values())
    return float("inf")  # floats (0.0 == -0.0), sets, objects: encoded as any value


def _same_as(value: Any, expr: str, name: str, names: list[int]) -> str:
    """A Python expression, true exactly when `expr` evaluates to data of `value`'s types and
    values throughout (1, True and 1.0 differ; so do a list and its subclass), so that its canonical
    text is `value`'s. `expr` is evaluated once, first, into the local `name`; `names` counts the
    locals made for the items (y0, y1, ...)."""
    bound = f"({name} := {expr})"
    t = type(value)
    if value is None or t is bool:
        return f"{bound} is {value!r}"
    if t in (str, int):
        return f"type({bound}) is {t.__name__} and {name} == {value!r}"
    items = list(enumerate(value)) if t is not dict else list(value.items())
    checks = [f"type({bound}) is {t.__name__}", f"len({name}) == {len(value)}"]
    for key, item in items:
        names[0] += 1
        read = f"{name}[{key}]" if t is not dict else f"{name}.get({key!r}, MISSING)"
        checks.append(f"({_same_as(item, read, f'y{names[0]}', names)})")
    return " and ".join(checks)


def _is_constant(value: Any) -> bool:
    """A str, int, float, bool or None, or a tuple of these (nested): no instance can change it,
    so one object has one text for good."""
    t = type(value)
    return t in _SCALARS or (t is tuple and all(_is_constant(x) for x in value))


def _no_dependencies(placeholder: OutputPathOf) -> str:
    raise AssertionError("a constant holds no placeholder")


def _hint(v: Any, t: type) -> str:
    """How to fix a value the encoder refuses."""
    qualified = f"{t.__module__}.{t.__qualname__}"
    register = (f"Say how it becomes canonical data with `executor.register_encoding({qualified}, "
                f"lambda v: ...)` returning plain config data (docs/concepts.md: \"Encoding config values\"), or "
                f"declare the field execution_only(...) if it does not change what the step produces.")
    shape = getattr(v, "shape", None)
    if shape == () or (shape is None and isinstance(v, (int, float))):  # numbers of another library
        dtype_kind = getattr(getattr(v, "dtype", None), "kind", None)
        kind = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}.get(
            dtype_kind, "int" if isinstance(v, int) else "float")
        return f"Convert it to a plain {kind} (e.g. `{kind}(x)` or `x.item()`), or: {register}"
    if isinstance(shape, tuple):
        return (f"Arrays are not hashed element by element: convert it to a tuple (`tuple(x.tolist())`) or "
                f"write it to a file a step produces. Or: {register}")
    return register


def _nesting_error(config: Any, step_name: str | None) -> ConfigEncodingError:
    cycle = find_cycle(config)
    if cycle is not None:
        path, value = cycle
        return ConfigEncodingError(step_name, format_path(path), value,
                                   "It contains itself (a cycle): a config must be a tree. Build the "
                                   "value without referring to itself.")
    return ConfigEncodingError(step_name, "", config, "It is nested too deeply to encode; flatten it.")


def find_cycle(config: Any) -> tuple[tuple, Any] | None:
    """(path, container) of the first container found inside itself, else None. Iterative."""
    stack: list[tuple[Any, tuple, frozenset[int]]] = [(config, (), frozenset())]
    while stack:
        value, path, ancestors = stack.pop()
        if id(value) in ancestors:
            return path, value
        children = _children(value)
        if children:
            inner = ancestors | {id(value)}
            stack.extend((child, path + (key,), inner) for key, child in children)
    return None


def _children(value: Any) -> list[tuple[Any, Any]]:
    kind = _kind(type(value))
    if kind == _DATACLASS:
        return [(n, getattr(value, n)) for n in kept_field_names(type(value), is_hashed_field)]
    if kind in (_LIST, _TUPLE, _NAMEDTUPLE):
        return list(enumerate(value))
    if kind == _DICT:
        return list(value.items())
    if kind == _SET:
        return [("{}", x) for x in value]
    return []


def surrogate_error(step: ExecutorStep) -> ConfigEncodingError:
    """The error for a step whose identity holds a string that is not valid Unicode text (a lone
    surrogate, e.g. from a file name decoded with errors="surrogateescape")."""
    hint = ("It holds a lone surrogate code point, which is not valid Unicode text and cannot be hashed. "
            "Decode the text properly, or pass it as bytes.")
    if not _valid_text(step.code_version or ""):
        return ConfigEncodingError(step.name, "code_version", step.code_version, hint)
    stack: list[tuple[Any, tuple]] = [(step.config, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str) and not _valid_text(value):
            return ConfigEncodingError(step.name, format_path(path), value, hint)
        if isinstance(value, (OutputPathOf, ThisOutputPath)) and not _valid_text(value.sub or ""):
            return ConfigEncodingError(step.name, format_path(path + ("sub",)), value.sub, hint)
        for key, child in _children(value):
            if isinstance(key, str) and not _valid_text(key):
                return ConfigEncodingError(step.name, format_path(path + (key,)), key, hint)
            stack.append((child, path + (key,)))
    return ConfigEncodingError(step.name, "", step.config, hint)


def _valid_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_value(config: Any, digest_of: DigestOf, step_name: str | None = None) -> Any:
    """The canonical form of a config tree as JSON data (execution-only fields left out)."""
    return json.loads(CanonicalEncoder(digest_of).config_text(config, step_name))
