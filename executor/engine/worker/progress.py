"""Progress lines for work inside a step: counts, rates and an ETA, throttled to one line every
few seconds. Plain lines, because step output travels through Ray's log forwarding, not a TTY.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


def _human(n: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


class Progress:
    """Counts work done towards an optional total and prints a line at most every `interval` s."""

    def __init__(
        self,
        desc: str,
        total: float | None = None,
        unit: str = "items",
        interval: float = 2.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.desc, self.total, self.unit, self.interval = desc, total, unit, interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.done = 0.0
        self.started = clock()
        self._last_print = self.started

    def update(self, amount: float = 1) -> None:
        self.done += amount
        now = self.clock()
        if now - self._last_print >= self.interval:
            self._last_print = now
            self._print(now)

    def line(self, now: float | None = None) -> str:
        elapsed = max((self.clock() if now is None else now) - self.started, 1e-9)
        rate = self.done / elapsed
        text = f"[{self.desc}] {_human(self.done)}"
        if self.total:
            text += f"/{_human(self.total)} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += f", {_human(rate)} {self.unit}/s, {elapsed:.1f}s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", eta {(self.total - self.done) / rate:.0f}s"
        return text

    def _print(self, now: float) -> None:
        print(self.line(now), file=self.stream, flush=True)

    def close(self) -> None:
        self._print(self.clock())


def track(items: Iterable[T], desc: str, total: int | None = None, unit: str = "items") -> Iterator[T]:
    """Iterate over `items`, printing progress lines; a final line when done."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    progress = Progress(desc, total, unit)
    for item in items:
        yield item
        progress.update()
    progress.close()
