"""Frozen dataclass instances built without their generated __init__.

A frozen dataclass's __init__ sets each field through object.__setattr__, which costs more than the
rest of building the instance; planning 10,000 steps builds several per step (node, status,
decision, report). `new_frozen` fills the instance's __dict__ in one call. Defaults are not applied:
every field must be given (tests/executor/test_frozen.py holds each caller to that).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def new_frozen(cls: type[T], values: dict[str, Any]) -> T:
    """`cls(**values)` for a frozen dataclass whose every field is in `values`, without __init__."""
    instance = object.__new__(cls)
    instance.__dict__.update(values)
    return instance
