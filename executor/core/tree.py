"""The one walker over config trees (dataclasses, lists, tuples, dicts, sets).

Placeholder resolution and the tools' walks are folds over this traversal. The canonical encoder
(canonical.py) walks the same structure with its own loop, specialised for speed (hashing is most
of planning), and discovers dependencies as it hashes; tests/executor/test_canonical_reference.py
holds the two walkers to the same answer.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from executor.core.step import ExecutorStep, MirroredPath, OutputPathOf, PrefixPath, TaggedOutput, ThisOutputPath

Path = tuple  # of str (field or dict key) and int (list index)
Leaf = Callable[[Any, Path], Any]
Node = Callable[[Any, list[tuple[Any, Any]], Path], Any]

PLACEHOLDER_TYPES = (OutputPathOf, ThisOutputPath, PrefixPath, MirroredPath, TaggedOutput)
_PLAIN = frozenset({str, int, bool, type(None)})  # passed through by every fold
_SCALARS = frozenset({float, bytes})  # other common leaves, checked before the dataclass test


def keep_all_fields(f: dataclasses.Field) -> bool:
    return True


@functools.lru_cache(maxsize=4096)
def kept_field_names(cls: type, keep_field: Callable[[dataclasses.Field], bool]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if keep_field(f))


def is_config_dataclass(value: Any) -> bool:
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and not isinstance(value, (*PLACEHOLDER_TYPES, ExecutorStep)))


def fold(value: Any, leaf: Leaf, node: Node, path: Path = (),
         keep_field: Callable[[dataclasses.Field], bool] = keep_all_fields) -> Any:
    """Post-order fold: `node(value, [(key, folded child)], path)` for containers, `leaf` otherwise.

    Plain str, int, bool and None are kept as they are without calling `leaf`: every fold keeps
    them unchanged, and skipping the call halves the walker's calls on wide configs. Placeholders
    and steps are leaves. Set children carry the key None (sets have no order).
    """
    def go(v: Any, p: Path) -> Any:  # callers skip it for plain children, the hot path
        kind = type(v)
        if kind in _PLAIN:
            return v
        if kind is list or kind is tuple:
            return node(v, [(i, x if type(x) in _PLAIN else go(x, p + (i,))) for i, x in enumerate(v)], p)
        if kind is dict:
            return node(v, [(k, x if type(x) in _PLAIN else go(x, p + (k,))) for k, x in v.items()], p)
        if kind in _SCALARS:
            return leaf(v, p)
        if is_config_dataclass(v):
            children = []
            for name in kept_field_names(kind, keep_field):
                x = getattr(v, name)
                children.append((name, x if type(x) in _PLAIN else go(x, p + (name,))))
            return node(v, children, p)
        if isinstance(v, (list, tuple)):
            return node(v, [(i, go(x, p + (i,))) for i, x in enumerate(v)], p)
        if isinstance(v, dict):
            return node(v, [(k, go(x, p + (k,))) for k, x in v.items()], p)
        if isinstance(v, (set, frozenset)):
            return node(v, [(None, go(x, p + ("{}",))) for x in v], p)
        return leaf(v, p)

    return go(value, path)


def format_path(path: Path) -> str:
    """('train', 'optimizer', 'schedule') -> 'train.optimizer.schedule'; indices as [i]."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def rebuild(value: Any, children: list[tuple[Any, Any]], path: Path = ()) -> Any:
    """A node function that rebuilds the container with its folded children."""
    if dataclasses.is_dataclass(value):
        init_names = {f.name for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **{k: v for k, v in children if k in init_names})
    if isinstance(value, list):
        return [v for _, v in children]
    if isinstance(value, tuple):
        items = [v for _, v in children]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return type(value)((k, v) for k, v in children)
    return type(value)(v for _, v in children)


def resolve(config: Any, substitute: Callable[[Any, Path], Any]) -> Any:
    """A copy of the config with every leaf passed through `substitute` (placeholders -> paths)."""
    return fold(config, substitute, rebuild)
