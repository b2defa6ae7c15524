"""A step the auto runner started off Ray asks for Ray at its first fan-out (`map_shards`).

In an inline child of the auto runner the step runs under `ray_on_fan_out`; `here.fan_out` then
marks the flag and raises NeedsRay instead of running the shards in order, and the auto runner
runs the step again, from its start, on Ray (runner/auto.py). A module of its own, importing
nothing, so that the inline runner and `here` both use it without importing each other.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

# Set (to a one-item list, the "asked" flag) in an inline child of the auto runner while its step
# runs: a ContextVar, not a module global, as for the step's storage options (engine/prefix/location.py).
_FAN_OUT_ASKS_RAY: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "stepgraph_fan_out_asks_ray", default=None)


class NeedsRay(BaseException):
    """Raised by a fan-out in a step the auto runner started off Ray: the step is run again on Ray.
    A BaseException, so that a step's `except Exception` does not swallow it."""


@contextlib.contextmanager
def ray_on_fan_out() -> Iterator[list[bool]]:
    """While the block runs, a fan-out sets the yielded flag and raises NeedsRay (`ask_for_ray`)."""
    asked = [False]
    token = _FAN_OUT_ASKS_RAY.set(asked)
    try:
        yield asked
    finally:
        _FAN_OUT_ASKS_RAY.reset(token)


def ask_for_ray(what: str) -> None:
    """Under `ray_on_fan_out`: mark the flag and raise NeedsRay. Elsewhere: nothing."""
    asked = _FAN_OUT_ASKS_RAY.get()
    if asked is not None:
        asked[0] = True
        raise NeedsRay(f"{what} fans work out: the step runs again on Ray")
