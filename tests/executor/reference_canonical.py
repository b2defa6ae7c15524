"""The canonical encoder as it was before issue 14, kept verbatim as a reference: the fast encoder
in executor/core/canonical.py must give byte-identical output for every config this one accepts
(tests/executor/test_canonical_reference.py), so no stored output is re-addressed. Namedtuples are
the one deliberate difference (issue 12: their type is now part of the identity).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import pathlib
from typing import Any, Callable

from executor.core.errors import ConfigEncodingError
from executor.core.step import ExecutorStep, OutputPathOf, ThisOutputPath, is_execution_only
from executor.core.tree import Path, fold, format_path

DigestOf = Callable[[OutputPathOf], str]  # dependency placeholder -> its full digest


def _type_name(t: type) -> str:
    return t.__qualname__  # issue 44: without the module (the fast encoder's one change since)


def is_hashed_field(f: dataclasses.Field) -> bool:
    return not is_execution_only(f)


def encode_value(config: Any, digest_of: DigestOf, step_name: str | None = None) -> Any:
    """The JSON-compatible canonical form of a config tree (execution-only fields left out)."""

    def leaf(v: Any, path: Path) -> Any:
        kind = type(v)  # plain str, int, bool and None never reach here (the fold keeps them)
        if kind is float:
            return {"float": repr(v) if math.isfinite(v) else str(v)}
        if isinstance(v, enum.Enum):
            return {"enum": _type_name(type(v)), "name": v.name}
        if isinstance(v, (bytes, bytearray)):
            return {"bytes": bytes(v).hex()}
        if isinstance(v, pathlib.PurePath):
            return {"path": v.as_posix()}
        if isinstance(v, OutputPathOf):
            return {"dependency": digest_of(v), "sub": v.sub}
        if isinstance(v, ThisOutputPath):
            return {"this_output": v.sub}
        if isinstance(v, ExecutorStep):
            raise ConfigEncodingError(step_name, format_path(path), v,
                                      f"Refer to another step's output with output_path_of({v.name!r} step).")
        if isinstance(v, (int, float)) or getattr(v, "shape", None) == ():  # numpy scalars, subclasses
            kind = "int" if isinstance(v, int) or "int" in type(v).__name__ else "float"
            raise ConfigEncodingError(step_name, format_path(path), v,
                                      f"Convert it to a plain {kind} (e.g. `{kind}(x)` or `x.item()`).")
        raise ConfigEncodingError(step_name, format_path(path), v)

    def node(v: Any, children: list, path: Path) -> Any:
        kind = type(v)
        if kind is not list and kind is not tuple and kind is not dict and dataclasses.is_dataclass(v):
            return {"dataclass": _type_name(kind), "fields": dict(children)}
        if isinstance(v, list):
            return [c for _, c in children]
        if isinstance(v, tuple):
            return {"tuple": [c for _, c in children]}
        if isinstance(v, dict):
            for k, _ in children:
                if not isinstance(k, str):
                    raise ConfigEncodingError(step_name, format_path(path + (k,)), k,
                                              "Dict keys in configs must be strings.")
            return {"dict": {k: c for k, c in children}}
        return {"set": sorted((c for _, c in children), key=canonical_json)}

    return fold(config, leaf, node, keep_field=is_hashed_field)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")
