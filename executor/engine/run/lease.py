"""Leases on status objects: acquire, heartbeat, staleness, takeover and the fenced commit.

The generation a holder last wrote is its fencing token: every write is a CAS against it, so a
holder whose lease was taken over can never publish. A holder that has not renewed for half the
TTL treats its lease as lost by itself (a paused or partitioned holder stops on its own); a
lease lost so, to its own silence only, may be reclaimed for a task that has already ended (one
CAS against the last generation: it lands only if nobody took the lease meanwhile).
Staleness is judged on the observer's own monotonic clock: a lease is stale when its generation
has not changed for a full TTL of *our* time. Clocks are injectable so tests never sleep.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from executor.core.record import State, Status
from executor.engine.store.base import CoordinationStore, StoreError, Versioned

Clock = Callable[[], float]


@contextlib.contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    """Release a lock acquired (with a timeout) just before."""
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class LeaseSettings:
    ttl_s: float        # no defaults here: the command line's and RunOptions' are the only ones
    heartbeat_s: float

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_s < self.ttl_s / 2:
            raise ValueError(f"lease heartbeat interval ({self.heartbeat_s}s) must be positive and "
                             f"under half the TTL ({self.ttl_s}s)")


@dataclass
class Lease:
    key: str
    status: Status
    generation: str
    renewed_at: float  # monotonic time of the last successful write
    lost_reason: str | None = None
    lapsed: bool = False  # lost to our own silence only: no takeover seen (see LeaseKeeper.reclaim)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None


class LeaseKeeper:
    """Holds this process's leases; one heartbeat thread starts each lease's renewal on its own thread."""

    def __init__(self, store: CoordinationStore, settings: LeaseSettings,
                 clock: Clock = time.monotonic, wall_clock: Clock = time.time):
        self.store, self.settings, self.clock, self.wall_clock = store, settings, clock, wall_clock
        self._held: dict[str, Lease] = {}
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewing: dict[str, threading.Thread] = {}  # the heartbeat's renewal per lease key

    # -- acquiring -------------------------------------------------------------------------
    def acquire(self, key: str, status: Status, current: Versioned | None) -> Lease | None:
        """Create the status (current is None) or CAS over the generation just read.

        Returns None when another runner got there first: a normal outcome, not an error. Also
        None when the write returned past half the TTL (it backed off) and one more write could
        not renew it: a step never starts on a lapsed lease; the status is ours, and the run takes
        it back on its next pass.
        """
        data = status.to_bytes()
        sent = self.clock()  # the lease's age counts from before the write (see renew)
        if current is None:
            generation = self.store.create_if_absent(key, data)
        else:
            generation = self.store.replace_if_generation(key, data, current.generation)
        if generation is None:
            return None
        lease = Lease(key, status, generation, sent)
        self._expire_if_silent(lease)
        with self._held_lock:
            self._held[key] = lease
        if lease.lapsed and not self.reclaim(lease):
            with self._held_lock:
                self._held.pop(key, None)
            return None
        return lease

    # -- holding ---------------------------------------------------------------------------
    def is_valid(self, lease: Lease) -> bool:
        self._expire_if_silent(lease)
        return not lease.lost

    def _expire_if_silent(self, lease: Lease) -> None:
        silent = self.clock() - lease.renewed_at
        if not lease.lost and silent > self.settings.ttl_s / 2:
            lease.lost_reason = f"not renewed for {silent:.0f}s (over half the {self.settings.ttl_s:.0f}s TTL)"
            lease.lapsed = True

    @staticmethod
    def _taken(lease: Lease, reason: str) -> None:
        lease.lost_reason, lease.lapsed = reason, False  # a takeover seen: never reclaimed

    def renew(self, lease: Lease) -> None:
        with lease.lock:
            if lease.lost or lease.key not in self._held:
                return
            new = lease.status.next(written_at=self.wall_clock())
            # Counted from before the write: a call that hangs (or a process paused mid-call) and
            # then succeeds must not make the lease look freshly renewed — an observer may have
            # judged it stale meanwhile, from the write's own time.
            sent = self.clock()
            try:
                generation = self.store.replace_if_generation(lease.key, new.to_bytes(), lease.generation)
            except StoreError:
                self._expire_if_silent(lease)  # keep trying until half the TTL has passed
                return
            if generation is None:
                self._taken(lease, "taken over by another runner (status changed under us)")
                return
            lease.status, lease.generation, lease.renewed_at = new, generation, sent
            self._expire_if_silent(lease)

    def reclaim(self, lease: Lease) -> bool:
        """Take back a lease lost to our own silence only, for a task that has ended: one CAS against
        the generation we last wrote. It lands only if nobody wrote the status since (a takeover
        changes the generation), so no other runner ran the step while ours did and the ended
        task's output is the only one; and the write makes the lease fresh, so no observer can
        judge it stale before the commit. False (and still lost) when it was taken, or the store
        does not answer. A task still running is not reclaimed: it is stopped (the half-TTL rule).
        `acquire` reclaims a lease its own write left lapsed, before any task starts on it."""
        with lease.lock:
            if not lease.lapsed or lease.key not in self._held:
                return False
            new = lease.status.next(written_at=self.wall_clock())
            sent = self.clock()  # counted from before the write, as renew counts
            try:
                generation = self.store.replace_if_generation(lease.key, new.to_bytes(), lease.generation)
            except StoreError:
                return False
            if generation is None:
                self._taken(lease, f"taken over by another runner (found when reclaiming: {lease.lost_reason})")
                return False
            lease.status, lease.generation, lease.renewed_at = new, generation, sent
            lease.lost_reason, lease.lapsed = None, False
            self._expire_if_silent(lease)
            return not lease.lost

    def confirm(self, lease: Lease) -> bool:
        """Is the lease still ours right now? One read, no write: the status must still carry the
        generation we last wrote (any takeover changes it), and our last renewal must be under
        half the TTL old (so no observer can judge it stale before our next write lands)."""
        with lease.lock:
            if not self.is_valid(lease):
                return False
            try:
                current = self.store.read(lease.key)
            except StoreError:
                return self.is_valid(lease)  # unknown: the fenced commit will still refuse a lost lease
            if current is None or current.generation != lease.generation:
                self._taken(lease, "taken over by another runner (status changed under us)")
            return self.is_valid(lease)

    def held(self) -> list[Lease]:
        with self._held_lock:
            return list(self._held.values())

    # -- ending ----------------------------------------------------------------------------
    def finish(self, lease: Lease, final: Status, lock_timeout_s: float = -1) -> bool:
        """The fenced commit: CAS to a terminal status against our last generation.

        False (and nothing written) if the lease was lost; the caller must not publish.
        """
        if not lease.lock.acquire(timeout=lock_timeout_s):
            return False  # another thread is stuck writing this status: give up rather than hang
        with _held(lease.lock):
            try:
                if not self.is_valid(lease):
                    return False
                generation = self.store.replace_if_generation(lease.key, final.to_bytes(), lease.generation)
                if generation is None:
                    self._taken(lease, "taken over by another runner before commit")
                    return False
                lease.status, lease.generation = final, generation
                return True
            finally:
                with self._held_lock:
                    self._held.pop(lease.key, None)

    def release_all(self, reason: str, lock_timeout_s: float = 2.0) -> list[str]:
        """End every lease still held as FAILED with `reason` (Ctrl-C, SIGTERM, a runner error, a
        forced exit), waiting up to `lock_timeout_s` a lease for a renewal in flight. Returns the keys
        that could not be released (they go stale after the TTL)."""
        left = []
        for lease in self.held():
            final = lease.status.next(state=State.FAILED, error=reason, written_at=self.wall_clock())
            try:
                released = self.finish(lease, final, lock_timeout_s)
            except Exception:  # noqa: BLE001 - storage down: nothing more can be done from here
                released = False
            if not released and not lease.lost:
                left.append(lease.key)
        return left

    # -- heartbeat thread ------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_s):
            self._start_renewals()

    def _start_renewals(self) -> None:
        """A renewal thread for every held lease whose last renewal has returned; waits for none.

        Each lease renews on its own: a write that hangs or backs off delays only its own lease.
        (Renewing in turn on this thread let one slow write cost every other lease its slack.)
        """
        started = {}
        for lease in self.held():
            thread = self._renewing.get(lease.key)
            if thread is None or not thread.is_alive():
                thread = threading.Thread(target=self.renew, args=(lease,), name="lease-heartbeat-renew",
                                          daemon=True)
                thread.start()
            started[lease.key] = thread
        self._renewing = started

    def stop(self) -> None:
        """Stop the heartbeat and wait (5 s in all) for its renewals in flight to return."""
        self._stop.set()
        deadline = time.monotonic() + 5
        if self._thread is not None:
            self._thread.join(timeout=5)
        for thread in self._renewing.values():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


class StalenessWatch:
    """Tracks how long each observed status has kept the same generation, on our own clock."""

    def __init__(self, ttl_s: float, clock: Clock = time.monotonic):
        self.ttl_s, self.clock = ttl_s, clock
        self._seen: dict[str, tuple[str, float]] = {}

    def observe(self, key: str, generation: str) -> float:
        """Record an observation; returns for how long (our clock) the generation has not moved."""
        previous = self._seen.get(key)
        now = self.clock()
        if previous is None or previous[0] != generation:
            self._seen[key] = (generation, now)
            return 0.0
        return now - previous[1]

    def is_stale(self, key: str, generation: str) -> bool:
        return self.observe(key, generation) >= self.ttl_s

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)
