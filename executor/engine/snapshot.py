"""Reading many status objects at once: the snapshot that planning decides from.

Reads run on a bounded thread pool so that planning against object storage costs a few waves of
round trips rather than one request per step after another. Reads only.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from executor.core.errors import StatusError
from executor.core.graph import StepNode, gc_paused
from executor.core.plan import NOT_OBSERVED, Observed
from executor.core.record import parse_status, status_key
from executor.engine.store.base import CoordinationStore, Versioned
from executor.engine.store.local import LocalStore
from executor.engine.store.memory import MemoryStore


def observe(versioned: Versioned | None, where: str, owners: dict | None = None) -> Observed:
    """The status read (`where` names it in errors; `owners`: see parse_status)."""
    if versioned is None:
        return NOT_OBSERVED
    return Observed(parse_status(versioned.data, where, owners), versioned.generation)


def read_many(store: CoordinationStore, keys: list[str], parallelism: int = 64) -> Iterator[Versioned | None]:
    """store.read of each key, in order: on a thread pool for object stores, in this thread for
    local and memory stores (where a pool only slows the reads down)."""
    if isinstance(store, LocalStore):
        yield from store.read_many(keys)
        return
    if isinstance(store, MemoryStore) or len(keys) < 4:
        yield from map(store.read, keys)
        return
    import concurrent.futures  # here: planning on local disk never needs it

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(parallelism, len(keys))) as pool:
        yield from pool.map(store.read, keys)


def read_snapshot(store: CoordinationStore, nodes: Iterable[StepNode], parallelism: int = 64) -> dict[str, Observed]:
    with gc_paused():
        nodes = list(nodes)
        keys = [status_key(n.output_rel) for n in nodes]
        owners: dict = {}
        snapshot = {}
        for n, key, versioned in zip(nodes, keys, read_many(store, keys, parallelism)):
            try:
                snapshot[n.digest] = observe(versioned, "", owners)  # the file's path is made only if it is corrupt
            except StatusError:
                observe(versioned, f"{store.root}/{key}")  # the same bytes parsed again: this error names the file
                raise
        return snapshot
