"""The run's lineage marker writes (executor/engine/prefix/lineage_marks.py), off the run loop.

A commit hands its output's markers to the run's `MarkWriter` and goes on at once: the writer creates
them on a small pool of threads of its own (started at the first commit, so a run that commits nothing
starts none), every consumers/ marker of a commit at the same time, then that commit's outputs/ marker,
which vouches for them, once they are all there. The markers only speed `lineage --down` up, and the
walk counts one only while the status listing shows the generation it names, so a marker not written
is never wrong: a failed write becomes a warning event (emitted from the run loop's thread, at the next
commit or at `drain`) and the walk reads that output's status and record instead. The run calls
`drain` before it returns, so no marker write is still in flight when the run has ended.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from executor.engine.prefix.lineage_marks import marker_keys

THREADS = 8  # marker writes in flight at once, per run


class _Commit:
    """One output's markers: its consumers/ ones written at once, then its outputs/ one."""

    def __init__(self, rel: str, last: str, waiting: int):
        self.rel, self.last, self.waiting, self.error = rel, last, waiting, None
        self.lock = threading.Lock()


class MarkWriter:
    """Writes the markers of each output the run commits, concurrently, after the commit."""

    def __init__(self, store: Any, events: Any, threads: int = THREADS):
        self.store, self.events, self.threads = store, events, threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._pending: set[Future] = set()
        self._failed: list[tuple[str, str]] = []  # (rel, error) of commits whose markers were not all written

    def submit(self, rel: str, status: Any, generation: str, record: dict[str, Any]) -> None:
        """Write the markers of `rel`, committed at `generation`, in the background."""
        self._warn()
        keys = marker_keys(rel, status, generation, record)
        if keys is None:
            return
        consumers, last = keys
        commit = _Commit(rel, last, len(consumers))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="stepgraph-lineage-marks")
        for key in consumers or [None]:
            future = self._pool.submit(self._write, commit, key)
            with self._lock:
                self._pending.add(future)
            future.add_done_callback(self._done)

    def drain(self) -> None:
        """Wait for every marker write in flight, stop the threads, and warn of the writes that failed."""
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                break
            for future in pending:
                future.exception()  # waits; _write never raises
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._warn()

    def _write(self, commit: _Commit, key: str | None) -> None:
        error = None
        if key is not None:
            error = self._create(key)
            with commit.lock:
                commit.error = commit.error or error
                commit.waiting -= 1
                if commit.waiting:
                    return  # another write of this commit writes the outputs/ marker
                error = commit.error
        if error is None:
            error = self._create(commit.last)  # last: it says the consumers/ ones are all there
        if error is not None:
            with self._lock:
                self._failed.append((commit.rel, error))

    def _create(self, key: str) -> str | None:
        try:
            self.store.create_if_absent(key, b"")
            return None
        except Exception as e:  # noqa: BLE001 - the step is committed; lineage reads its record instead
            return f"{type(e).__name__}: {e}"

    def _done(self, future: Future) -> None:
        with self._lock:
            self._pending.discard(future)

    def _warn(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, []
        for rel, error in failed:
            self.events.warning(f"{rel}: could not write its lineage markers ({error}); "
                                "`stepgraph lineage --down` will read its status and record instead")


__all__ = ["MarkWriter", "THREADS"]
