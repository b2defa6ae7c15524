"""Reading many status objects at once: the snapshot that planning decides from.

Reads run on a bounded thread pool so that planning against object storage costs a few waves of
round trips rather than one request per step after another. Reads only.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Iterable

from executor.graph import StepNode, gc_paused
from executor.plan import Observed
from executor.record import parse_status, status_key
from executor.store.base import CoordinationStore, Versioned
from executor.store.local import LocalStore
from executor.store.memory import MemoryStore


def observe(versioned: Versioned | None, where: str) -> Observed:
    if versioned is None:
        return Observed(None)
    return Observed(parse_status(versioned.data, where), versioned.generation)


def read_one(store: CoordinationStore, node: StepNode) -> Observed:
    key = status_key(node.output_rel)
    return observe(store.read(key), f"{store.root}/{key}")


def read_snapshot(store: CoordinationStore, nodes: Iterable[StepNode], parallelism: int = 64) -> dict[str, Observed]:
    with gc_paused():
        return _read_snapshot(store, list(nodes), parallelism)


def _read_snapshot(store: CoordinationStore, nodes: list[StepNode], parallelism: int) -> dict[str, Observed]:
    if isinstance(store, (LocalStore, MemoryStore)) or len(nodes) < 4:
        return {n.digest: read_one(store, n) for n in nodes}  # a thread pool only slows local reads
    with cf.ThreadPoolExecutor(max_workers=min(parallelism, len(nodes))) as pool:
        return dict(zip((n.digest for n in nodes), pool.map(lambda n: read_one(store, n), nodes)))
