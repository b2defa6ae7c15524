"""A step's return value as JSON data in its record, and back again.

JSON values are stored as they are. A dataclass (nested, with paths, enums, tuples inside) is
stored as its fields, through draccus's encoder, with its type's `module:qualname` beside them,
so tools and people read the fields and `load_result` can rebuild it. Anything else is stored as
its repr, as text: still visible, never unpickled.

Stored data is portable and small: non-finite floats become the strings "NaN", "Infinity" and
"-Infinity" (the proto3 JSON mapping; bare NaN is not JSON, and strict parsers such as jq,
browsers and Go refuse the whole record), and a value over RESULT_LIMIT_BYTES fails the step with
a message saying where large data belongs (records are read by every status, verify and dry run).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

RESULT_LIMIT_BYTES = 4 << 20
NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def type_name(cls: type) -> str:
    """`module:qualname`, the module named by its file (see core/naming.py)."""
    from executor.core.naming import qualified_name

    module = qualified_name(cls)[: -len(cls.__qualname__) - 1]
    return f"{module}:{cls.__qualname__}"


def encode_result(value: Any) -> tuple[Any, str | None]:
    """(JSON data, the dataclass's `module:qualname` or None) for a step's return value."""
    try:
        json.dumps(value)
        return value, None
    except (TypeError, ValueError):
        pass
    import draccus

    try:
        data = draccus.encode(value)
        json.dumps(data)
    except Exception:  # noqa: BLE001 - draccus raises a bare Exception for a type it cannot encode
        return repr(value)[:2000], None
    is_instance = dataclasses.is_dataclass(value) and not isinstance(value, type)
    return data, type_name(type(value)) if is_instance else None


def decode_result(data: Any, cls: type) -> Any:
    """`data` (as stored by encode_result) rebuilt as an instance of the dataclass `cls`."""
    import draccus

    return draccus.decode(cls, data)


def portable_float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    return NON_FINITE.get(value, value)


def portable(value: Any) -> Any:
    """JSON data with every non-finite float replaced by its proto3-JSON string."""
    if isinstance(value, float):
        return portable_float(value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value


def storable_result(data: Any) -> tuple[Any, str | None]:
    """(what goes in the record, None) or (None, why the step must fail), for encoded data."""
    try:
        value = portable(data)
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        value = repr(data)[:2000]
        size = len(value)
    if size > RESULT_LIMIT_BYTES:
        return None, (f"the step returned {size / 2**20:.1f} MiB of JSON; a return value is kept in the step's "
                      f"record.json and must stay under {RESULT_LIMIT_BYTES >> 20} MiB. Return counts and small "
                      f"summaries, and write data as files under config.output_path")
    return value, None
