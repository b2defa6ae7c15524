"""The coordination protocol: the handful of storage operations leases are built on.

Keys are '/'-separated paths relative to the store's root (the executor prefix). A generation is
an opaque string that changes on every write of a key; it is the fencing token for CAS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence, runtime_checkable


class StoreError(Exception):
    """A storage call failed in a way retrying will not fix (permissions, bad bucket, bad data)."""


class TransientStoreError(StoreError):
    """A storage call failed in a way that may succeed if retried (5xx, 429, timeouts)."""


@dataclass(frozen=True, slots=True)  # slots: planning reads one per step
class Versioned:
    """Bytes read from the store together with the generation they were read at."""

    data: bytes
    generation: str


@runtime_checkable
class CoordinationStore(Protocol):
    """Conditional reads and writes of small objects. Losing a race returns None, never raises."""

    root: str

    def read(self, key: str) -> Versioned | None:
        """The object's bytes and generation from one response, or None if absent."""

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        """read() of each key, yielded in the order of `keys` (None for an absent one).

        What planning and every view of a prefix read statuses through: each backend reads as
        fast as it can (a local store relative to one open root, an object store many requests
        at a time). A failing read raises as read() would; nothing is written.
        """

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        """Write only if no object exists; the new generation, or None if one already existed."""

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        """Write only if the current generation matches; the new generation, or None on mismatch."""

    def delete(self, key: str) -> None:
        """Remove the object if present. For repair and garbage collection only."""

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        """(key -> generation) of objects under `prefix` whose key ends with `suffix`.

        Used to speed planning up; a listing never decides anything by itself.
        """


READ_PARALLELISM = 64  # requests in flight when an object store reads many keys


def read_concurrently(read: Callable[[str], Versioned | None], keys: Sequence[str],
                      parallelism: int = READ_PARALLELISM) -> Iterator[Versioned | None]:
    """`read` of each key, in order, up to `parallelism` at a time (object stores' read_many:
    a prefix of 10,000 statuses costs a few waves of round trips, not 10,000 one after another)."""
    keys = list(keys)
    if len(keys) < 4:
        yield from map(read, keys)
        return
    import concurrent.futures  # here: planning on a local disk never needs it

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(parallelism, len(keys))) as pool:
        yield from pool.map(read, keys)
