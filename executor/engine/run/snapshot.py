"""Reading many status objects at once: the snapshot that planning decides from.

Every status is read by one call of the store's read_many (an object store keeps many requests in
flight, so planning costs a few waves of round trips rather than one request per step after
another; a local store reads relative to one open root). Reads only.
"""

from __future__ import annotations

from typing import Iterable

from executor.core.errors import StatusError
from executor.core.gc_pause import gc_paused
from executor.core.graph import StepNode
from executor.core.plan import NOT_OBSERVED, Observed
from executor.core.record import parse_status, status_key
from executor.engine.store.base import CoordinationStore, Versioned


def observe(versioned: Versioned | None, where: str, owners: dict | None = None) -> Observed:
    """The status read (`where` names it in errors; `owners`: see parse_status)."""
    if versioned is None:
        return NOT_OBSERVED
    return Observed(parse_status(versioned.data, where, owners), versioned.generation)


def read_snapshot(store: CoordinationStore, nodes: Iterable[StepNode]) -> dict[str, Observed]:
    with gc_paused():
        nodes = list(nodes)
        keys = [status_key(n.output_rel) for n in nodes]
        owners: dict = {}
        snapshot = {}
        for n, key, versioned in zip(nodes, keys, store.read_many(keys)):
            try:
                snapshot[n.digest] = observe(versioned, "", owners)  # the file's path is made only if it is corrupt
            except StatusError:
                observe(versioned, f"{store.root}/{key}")  # the same bytes parsed again: this error names the file
                raise
        return snapshot
