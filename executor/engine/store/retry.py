"""Retrying transient storage failures, including conditional writes whose response was lost.

RetryingStore wraps any CoordinationStore. A TransientStoreError (5xx, 429, timeouts, resets) is
retried with exponential backoff and jitter, within a bounded number of attempts and total time;
a permanent StoreError surfaces at once, and an exhausted budget raises TransientStoreError naming
the operation, the key, the attempts and the last error.

A failed conditional write may still have taken effect. When a retried create or replace then
answers "lost the race", the store re-reads the key: if it holds exactly the bytes we wrote, the
earlier attempt landed and we return its generation. This relies on every writer writing bytes no
other writer would (the executor's status carries owner, attempt and a sequence number). If
another writer replaced our landed write before the re-read, we report the race as lost; callers
that must not double-apply (a counter) recognise their own write by its content, as the lease does.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

from executor.engine.store.base import CoordinationStore, TransientStoreError, Versioned

T = TypeVar("T")
READ_MANY_CHUNK = 1024  # keys per read_many call of the inner store (the unit a failure retries)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying: attempts and total seconds both bound a call."""

    max_attempts: int = 8
    first_delay_s: float = 0.1
    max_delay_s: float = 5.0
    multiplier: float = 2.0
    total_budget_s: float = 60.0

    def __post_init__(self) -> None:
        # every call makes its first attempt and counts 1, 2, ...: 0 (or 2.5) would never be reached
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be a whole number at least 1 (the first "
                             f"attempt counts), got {self.max_attempts!r}")

    def delay(self, retry: int, rng: random.Random) -> float:
        """Backoff before retry number `retry` (1, 2, ...): half fixed, half random ("equal jitter")."""
        ceiling = min(self.max_delay_s, self.first_delay_s * self.multiplier ** (retry - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass
class RetryCounts:
    """What the wrapper did, for tests, benchmarks and logs."""

    retries: int = 0
    gave_up: int = 0
    writes_confirmed_by_reread: int = 0
    writes_lost_after_retry: int = 0


class RetryingStore:
    """A CoordinationStore that retries transient failures of the store it wraps."""

    def __init__(self, inner: CoordinationStore, policy: RetryPolicy = RetryPolicy(), *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None):
        self.inner, self.policy = inner, policy
        self._sleep, self._clock = sleep, clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self.counts = RetryCounts()

    @property
    def root(self) -> str:
        return self.inner.root

    def read(self, key: str) -> Versioned | None:
        return self._retry("read", key, lambda: self.inner.read(key))[0]

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        """The inner read_many, READ_MANY_CHUNK keys at a time: a transient failure re-reads
        only its chunk (reads change nothing, so a repeat is harmless)."""
        keys = list(keys)
        for start in range(0, len(keys), READ_MANY_CHUNK):
            chunk = keys[start:start + READ_MANY_CHUNK]
            yield from self._retry("read_many", f"{chunk[0]} (+{len(chunk) - 1} more)",
                                   lambda: list(self.inner.read_many(chunk)))[0]

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        generation, retried = self._retry("create_if_absent", key,
                                          lambda: self.inner.create_if_absent(key, data))
        if generation is None and retried:
            return self._our_write_landed(key, data)
        return generation

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        new_generation, retried = self._retry(
            "replace_if_generation", key, lambda: self.inner.replace_if_generation(key, data, generation))
        if new_generation is None and retried:
            return self._our_write_landed(key, data)
        return new_generation

    def delete(self, key: str) -> None:
        self._retry("delete", key, lambda: self.inner.delete(key))

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        return self._retry("list_generations", prefix + "*" + suffix,
                           lambda: self.inner.list_generations(prefix, suffix))[0]

    def _our_write_landed(self, key: str, data: bytes) -> str | None:
        """After a retried write lost: did an earlier attempt of ours land? Its generation if so."""
        current = self.read(key)
        landed = current is not None and current.data == bytes(data)
        with self._lock:
            if landed:
                self.counts.writes_confirmed_by_reread += 1
            else:
                self.counts.writes_lost_after_retry += 1
        return current.generation if landed else None

    def _retry(self, operation: str, key: str, call: Callable[[], T]) -> tuple[T, bool]:
        """(result, whether any attempt failed before it) or TransientStoreError when out of budget."""
        started = self._clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return call(), attempt > 1
            except TransientStoreError as error:
                elapsed = self._clock() - started
                delay = self.policy.delay(attempt, self._rng)
                if attempt >= self.policy.max_attempts or elapsed + delay > self.policy.total_budget_s:
                    with self._lock:
                        self.counts.gave_up += 1
                    raise TransientStoreError(
                        f"{operation} {key!r} under {self.root}: still failing after {attempt} "
                        f"attempts over {elapsed:.1f}s (policy: {self.policy.max_attempts} attempts, "
                        f"{self.policy.total_budget_s:g}s); last error: {error}") from error
                with self._lock:
                    self.counts.retries += 1
                self._sleep(delay)
