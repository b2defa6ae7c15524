"""One counted, locked pause of the cyclic garbage collector, shared by every thread of the process.

Building a graph or a plan makes a few small acyclic objects per step; the collector's full
collections would rescan them all (about a third of hashing time on 10,000 steps). The collector
is one per interpreter, so a pause is counted: the first caller in (on any thread) notes whether
it was enabled and disables it, the last one out enables it again if it was. Two runs planning on
two threads therefore never re-enable it under each other's feet, nor leave it off. A caller that
calls gc.disable() itself while a pause is held gets the collector back enabled when the last pause
ends; pause around your own code rather than switching the collector inside ours.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator


class _Pause:
    """The process's pause count (process-wide because the collector is)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.was_enabled = False

    def enter(self) -> None:
        with self.lock:
            if self.holders == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.holders += 1

    def leave(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders == 0 and self.was_enabled:
                gc.enable()


_PAUSE = _Pause()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small acyclic objects; re-entrant
    and safe from any number of threads (the collector is back as found once every pause ended)."""
    _PAUSE.enter()
    try:
        yield
    finally:
        _PAUSE.leave()
