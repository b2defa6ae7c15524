"""A step's return value as JSON data in its record, and back again.

JSON values are stored as they are. A dataclass (nested, with paths, enums, tuples inside) is
stored as its fields, through draccus's encoder, with its type's `module:qualname` beside them,
so tools and people read the fields and `load_result` can rebuild it. Anything else is stored as
its repr, as text: still visible, never unpickled.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any


def type_name(cls: type) -> str:
    """`module:qualname`, the module named as identities name it (by file; see core/naming.py)."""
    from executor.core.naming import canonical_module_name

    return f"{canonical_module_name(cls.__module__)}:{cls.__qualname__}"


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
