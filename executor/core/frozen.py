"""Frozen dataclass instances built without their generated __init__.

A frozen dataclass's __init__ sets each field through object.__setattr__, which costs more than the
rest of building the instance; planning 10,000 steps builds several per step (node, status, report).
`new_frozen` fills the instance's __dict__ in one call. Defaults are not applied: every field must
be given (tests/executor/test_frozen.py holds each caller to that). Records of a few fields that need
no __dict__ (the plan's Observed and Decision, the placeholders) are slotted dataclasses instead:
their __init__ costs about as much and each instance is a fraction of the memory.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def new_frozen(cls: type[T], values: dict[str, Any]) -> T:
    """`cls(**values)` for a frozen dataclass whose every field is in `values`, without __init__."""
    instance = object.__new__(cls)
    instance.__dict__.update(values)
    return instance
