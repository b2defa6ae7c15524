"""A store that fails a seeded fraction of calls with TransientStoreError: a test fixture (fault
injection is no part of the product; tests wrap the store the opener returns).

A fault fires either *before* the wrapped call (nothing happened) or *after* it (the call took
effect and its answer is lost), which is what a timeout or a reset connection does to a real
conditional write. Seeded, so a failing test replays.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

from executor.engine.store.base import CoordinationStore, TransientStoreError, Versioned

T = TypeVar("T")

OPERATIONS = frozenset({"read", "create_if_absent", "replace_if_generation", "delete", "list_generations"})


@dataclass
class FaultCounts:
    calls: int = 0
    before: int = 0
    after: int = 0


class FaultyStore:
    """Wraps a store; each call fails with probability `failure_rate`, after taking effect with
    probability `after_fraction` of those failures."""

    def __init__(self, inner: CoordinationStore, *, failure_rate: float = 0.2,
                 after_fraction: float = 0.5, seed: int = 0,
                 operations: frozenset[str] = OPERATIONS):
        unknown = set(operations) - OPERATIONS
        if unknown:
            raise ValueError(f"FaultyStore operations {sorted(unknown)} unknown; choose from {sorted(OPERATIONS)}")
        if not 0 <= failure_rate <= 1 or not 0 <= after_fraction <= 1:
            raise ValueError(f"failure_rate={failure_rate} and after_fraction={after_fraction} must be in [0, 1]")
        self.inner = inner
        self.failure_rate, self.after_fraction, self.operations = failure_rate, after_fraction, operations
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.counts = FaultCounts()

    @property
    def root(self) -> str:
        return self.inner.root

    def read(self, key: str) -> Versioned | None:
        return self._maybe_fail("read", key, lambda: self.inner.read(key))

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        """One fault draw per batch, as a "read" (all of it happens, or none of it answers)."""
        keys = list(keys)
        return iter(self._maybe_fail("read", f"{len(keys)} keys", lambda: list(self.inner.read_many(keys))))

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        return self._maybe_fail("create_if_absent", key, lambda: self.inner.create_if_absent(key, data))

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        return self._maybe_fail("replace_if_generation", key,
                                lambda: self.inner.replace_if_generation(key, data, generation))

    def delete(self, key: str) -> None:
        return self._maybe_fail("delete", key, lambda: self.inner.delete(key))

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        return self._maybe_fail("list_generations", prefix, lambda: self.inner.list_generations(prefix, suffix))

    def _maybe_fail(self, operation: str, key: str, call: Callable[[], T]) -> T:
        with self._lock:
            self.counts.calls += 1
            fails = operation in self.operations and self._rng.random() < self.failure_rate
            after = fails and self._rng.random() < self.after_fraction
            if fails:
                if after:
                    self.counts.after += 1
                else:
                    self.counts.before += 1
        if fails and not after:
            raise TransientStoreError(f"injected fault before {operation} {key!r} (nothing happened)")
        result = call()
        if after:
            raise TransientStoreError(f"injected fault after {operation} {key!r} (it took effect; answer lost)")
        return result
