"""The run's lineage marker writes (executor/engine/prefix/lineage_marks.py), off the run loop.

A commit hands its output's markers to the run's `MarkWriter` and goes on at once: the writer creates
them on a small pool of threads of its own (started at the first commit, so a run that commits nothing
starts none), all of a commit's markers at the same time. The markers only speed `lineage --down` up,
and the walk counts an output's markers only when all of them are there at the generation the status
listing shows, so a marker not written is never wrong: a failed write becomes a warning event (emitted
from the run loop's thread, at the next commit or at `drain`) and the walk reads that output's status
and record instead. The run calls `drain` before it returns, so no marker write is still in flight
when the run has ended.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from executor.engine.prefix.lineage_marks import marker_keys

THREADS = 8  # marker writes in flight at once, per run


class MarkWriter:
    """Writes the markers of each output the run commits, concurrently, after the commit."""

    def __init__(self, store: Any, events: Any, threads: int = THREADS):
        self.store, self.events, self.threads = store, events, threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # the failures list, appended to from the pool's threads
        self._failed: list[tuple[str, str]] = []  # (rel, error) of marker writes that failed

    def submit(self, rel: str, status: Any, generation: str, record: dict[str, Any]) -> None:
        """Write the markers of `rel`, committed at `generation`, in the background."""
        self._warn()
        keys = marker_keys(rel, status, generation, record)
        if keys is None:
            return
        if self._pool is None:  # submit and drain are called from the run loop's thread only
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="stepgraph-lineage-marks")
        for key in keys:
            self._pool.submit(self._write, rel, key)

    def drain(self) -> None:
        """Wait for every marker write in flight, stop the threads, and warn of the writes that failed."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)  # waits for every submitted write
        self._warn()

    def _write(self, rel: str, key: str) -> None:
        try:
            self.store.create_if_absent(key, b"")
        except Exception as e:  # noqa: BLE001 - the step is committed; lineage reads its record instead
            with self._lock:
                self._failed.append((rel, f"{type(e).__name__}: {e}"))

    def _warn(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, []
        for rel, error in dict(failed).items():  # one warning per output
            self.events.warning(f"{rel}: could not write its lineage markers ({error}); "
                                "`stepgraph lineage --down` will read its status and record instead")


__all__ = ["MarkWriter", "THREADS"]
