"""Whole lines on the console when two threads write to it: the run's own lines and the step output
Ray forwards to the driver.

Ray's driver prints each forwarded line with print(), which writes the text and its newline in two
calls; a ✔ line written from another thread between the two lands inside a step's line (seen in a
piped run, about once in thirty). The console's writes and Ray's printer both hold LOCK, and a
writer that holds it leaves its streams flushed, so a pipe that carries stdout and stderr together
never gets half a line from either.
"""

from __future__ import annotations

import threading
from typing import Any, TextIO

LOCK = threading.RLock()  # one per process, as stdout and stderr are


class LockedFile:
    """A text stream whose every write (and flush) holds LOCK; anything else goes to the stream."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        with LOCK:
            return self._stream.write(text)

    def flush(self) -> None:
        with LOCK:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def print_line(text: str, stream: TextIO) -> None:
    """print(), but the text and its newline in one write under LOCK."""
    with LOCK:
        stream.write(text + "\n")
        stream.flush()
