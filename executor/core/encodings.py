"""The encoding registry: how a value of a library type becomes canonical data in an identity.

    from executor import register_encoding
    register_encoding(Money, lambda m: (m.currency, str(m.amount)))

A registered value is encoded as `{"type": NAME, "value": <canonical encoding of encode(v)>}`:
NAME (by default the class's `__qualname__`, without its module, as for dataclasses) is part of the
identity, and `encode` returns ordinary config data
(str, int, float, tuples, dicts with str keys, other registered values...). Registration is by
exact type; `subclasses=True` covers subclasses too, under the registered name. Built in:
datetime/date/time/timedelta/timezone, uuid, Decimal, Fraction, complex, range; numpy scalars,
dtypes and scalar types; jax PartitionSpec and jax.numpy scalar types. numpy, ml_dtypes and jax
are imported only when a config holds a value whose type comes from them.
"""

from __future__ import annotations

import datetime
import sys
from dataclasses import dataclass
from typing import Any, Callable

from executor.core.naming import qualified_name


@dataclass(frozen=True)
class Encoding:
    name: str  # what identities name the type by
    encode: Callable[[Any], Any]  # value -> ordinary config data
    subclasses: bool = False
    legacy_name: str = ""  # the name ids held before issue 44 (module-qualified): legacy_ids.py only


_exact: dict[type, Encoding] = {}
_with_subclasses: dict[type, Encoding] = {}
_constants: dict[int, tuple[Any, str, Any]] = {}  # id(obj) -> (obj, name, data): classes used as values
_listeners: list[Callable[[], None]] = []  # caches to clear when the registry changes


def register_encoding(cls: type, encode: Callable[[Any], Any], *, name: str | None = None,
                      subclasses: bool = False) -> None:
    """Say how values of `cls` become canonical data; `name` (default: the class's `__qualname__`,
    without its module, so moving the class keeps ids) is hashed.

    Give `name` to tell apart two registered types of one qualname (the library's own spelling,
    such as "numpy.float32"). Changing `name` or `encode` for a type changes the ids of every step
    whose config holds one.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_encoding() takes a class, got {cls!r}")
    if not callable(encode):
        raise TypeError(f"register_encoding({cls.__qualname__}, ...): encode must be a function of the value")
    entry = Encoding(name or cls.__qualname__, encode, subclasses, name or qualified_name(cls))
    _exact[cls] = entry
    if subclasses:
        _with_subclasses[cls] = entry
    for clear in _listeners:
        clear()


def register_constant(obj: Any, name: str, data: Any = None) -> None:
    """A specific object (such as the class `numpy.float32` used as a dtype) encoded by name."""
    _constants[id(obj)] = (obj, name, data)


def constant(value: Any) -> tuple[str, Any] | None:
    found = _constants.get(id(value))
    return (found[1], found[2]) if found is not None and found[0] is value else None


def on_change(clear: Callable[[], None]) -> None:
    _listeners.append(clear)


# Libraries whose encodings are registered on first sight of a value from them: importing numpy or
# jax costs a noticeable part of a second, and most configs hold neither.
_LAZY: dict[str, str] = {"numpy": "_register_numpy", "ml_dtypes": "_register_ml_dtypes",
                         "jax": "_register_jax", "jaxlib": "_register_jax", "uuid": "_register_uuid",
                         "decimal": "_register_decimal", "_pydecimal": "_register_decimal",
                         "fractions": "_register_fractions"}
_loaded: set[str] = set()


def lookup(cls: type) -> Encoding | None:
    """The encoding for values of `cls`, or None (an error for the caller to report)."""
    found = _exact.get(cls)
    if found is not None:
        return found
    for base in cls.__mro__[1:]:
        found = _with_subclasses.get(base)
        if found is not None:
            return found
    if load_lazy(cls.__module__):
        return lookup(cls)
    return None


def load_lazy(module: str) -> bool:
    """Register the built-in encodings for the library `module` belongs to; True if that added any."""
    top = (module or "").partition(".")[0]
    register = _LAZY.get(top)
    if register is None or register in _loaded or top not in sys.modules:
        return False
    _loaded.add(register)
    globals()[register]()
    return True


# -- built-in encodings --------------------------------------------------------------------------------
def _timezone(tz: datetime.timezone) -> Any:
    offset = tz.utcoffset(None)
    return (offset.days, offset.seconds, offset.microseconds, tz.tzname(None))


register_encoding(datetime.datetime, datetime.datetime.isoformat, name="datetime.datetime")
register_encoding(datetime.date, datetime.date.isoformat, name="datetime.date")
register_encoding(datetime.time, datetime.time.isoformat, name="datetime.time")
register_encoding(datetime.timedelta, lambda d: (d.days, d.seconds, d.microseconds), name="datetime.timedelta")
register_encoding(datetime.timezone, _timezone, name="datetime.timezone")
register_encoding(complex, lambda c: (c.real, c.imag), name="complex")
register_encoding(range, lambda r: (r.start, r.stop, r.step), name="range")


def _register_uuid() -> None:
    import uuid

    register_encoding(uuid.UUID, str, name="uuid.UUID")


def _register_decimal() -> None:
    import decimal

    register_encoding(decimal.Decimal, str, name="decimal.Decimal")


def _register_fractions() -> None:
    import fractions

    register_encoding(fractions.Fraction, lambda f: (f.numerator, f.denominator), name="fractions.Fraction")


def _dtype_data(dtype: Any) -> Any:
    """A dtype's name and byte order ('<', '>' or '|'), the same on every machine."""
    if dtype.fields is not None:  # structured: its full description
        return tuple(tuple(part) for part in dtype.descr)
    order = dtype.byteorder
    if order == "=":
        order = "<" if sys.byteorder == "little" else ">"
    return (dtype.name, order)


def _register_numpy() -> None:
    import numpy as np

    register_encoding(np.dtype, _dtype_data, name="numpy.dtype", subclasses=True)

    for t in set(np.sctypeDict.values()):
        name = f"numpy.{np.dtype(t).name}"
        encode: Callable[[Any], Any]
        if issubclass(t, np.bool_):
            encode = bool
        elif issubclass(t, (np.datetime64, np.timedelta64)):
            encode = lambda v: (np.datetime_data(v.dtype)[0], int(v.view("i8")))  # noqa: E731 - (unit, count)
        elif issubclass(t, np.integer):
            encode = int
        elif issubclass(t, np.floating) and t is not np.longdouble:
            encode = float
        elif issubclass(t, np.complexfloating) and t is not np.clongdouble:
            encode = complex
        elif issubclass(t, np.str_):
            encode = str
        else:  # bytes_ keeps its plain-bytes encoding; object_, void and long doubles are refused
            continue
        register_encoding(t, encode, name=name)
        register_constant(t, "numpy.scalar_type", np.dtype(t).name)


def _register_ml_dtypes() -> None:
    import numpy as np

    ml_dtypes = sys.modules["ml_dtypes"]
    for attr in dir(ml_dtypes):
        t = getattr(ml_dtypes, attr)
        if isinstance(t, type) and issubclass(t, np.generic) and t.__module__ == "ml_dtypes":
            register_encoding(t, float, name=f"numpy.{np.dtype(t).name}")
            register_constant(t, "numpy.scalar_type", np.dtype(t).name)


def _register_jax() -> None:
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec

    load_lazy("numpy")
    unconstrained = getattr(PartitionSpec, "UNCONSTRAINED", None)
    if unconstrained is not None:
        register_encoding(type(unconstrained), lambda v: None, name="jax.sharding.PartitionSpec.UNCONSTRAINED")

    def partition_spec(spec: PartitionSpec) -> Any:
        data: dict[str, Any] = {"partitions": tuple(spec)}
        for extra in ("unreduced", "reduced"):  # newer jax; left out while empty so older ids hold
            if getattr(spec, extra, None):
                data[extra] = frozenset(getattr(spec, extra))
        return data

    register_encoding(PartitionSpec, partition_spec, name="jax.sharding.PartitionSpec")
    register_encoding(type(jnp.float32), lambda t: str(t.dtype), name="jax.numpy.scalar_type")
