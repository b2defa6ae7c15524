"""A counter incremented by compare-and-swap retry loops: the workload of the concurrency tests.

The object holds {"count": n, "last": {writer: op}}. A writer's increment is recognised by its
(writer, op) pair, so an increment whose answer was lost (TransientStoreError, or a retrying
store reporting a race lost after its write landed and was overwritten) is never applied twice:
the writer re-reads and sees its own op. This is the discipline the lease follows (owner, seq).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from executor.engine.store import CoordinationStore, TransientStoreError, open_store

MAX_RACES_LOST_IN_A_ROW = 1000


def load(store: CoordinationStore, key: str) -> dict[str, Any]:
    current = store.read(key)
    return json.loads(current.data) if current else {"count": 0, "last": {}}


def increment(store: CoordinationStore, key: str, writer: str, times: int,
              think: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Add 1 `times` times. Returns counts of CAS wins ("won"), increments found already applied
    on re-reading ("unknown"), races lost ("lost"), transient errors ("errors"), and "wins": the
    counter value each won CAS wrote. `think` runs between the read and the write (to let other
    writers in, as deciding does in the executor)."""
    stats = {"won": 0, "unknown": 0, "lost": 0, "errors": 0}
    wins: list[int] = []
    for op in range(1, times + 1):
        lost_in_a_row = 0
        while True:
            # each race lost means another writer won meanwhile; the tests' writers win far fewer
            # rounds than this, so more means a compare-and-swap that never succeeds: fail, not hang
            if lost_in_a_row > MAX_RACES_LOST_IN_A_ROW:
                raise AssertionError(f"{writer} lost {lost_in_a_row} races in a row on {key!r} (op {op}): "
                                     f"the store's compare-and-swap never succeeds")
            try:
                current = store.read(key)
            except TransientStoreError:
                stats["errors"] += 1
                continue
            state = json.loads(current.data) if current else {"count": 0, "last": {}}
            if state["last"].get(writer, 0) >= op:
                stats["unknown"] += 1  # an earlier attempt landed; its answer was lost
                break
            think()
            new = json.dumps({"count": state["count"] + 1, "last": {**state["last"], writer: op}},
                             sort_keys=True).encode()
            try:
                if current is None:
                    generation = store.create_if_absent(key, new)
                else:
                    generation = store.replace_if_generation(key, new, current.generation)
            except TransientStoreError:
                stats["errors"] += 1  # outcome unknown: the next read tells
                continue
            if generation is not None:
                stats["won"] += 1
                wins.append(state["count"] + 1)
                break
            stats["lost"] += 1
            lost_in_a_row += 1
    return {**stats, "wins": wins}


def increment_in_process(prefix: str, storage_options: dict, key: str, writer: str, times: int) -> dict:
    """Entry point for a spawned process: open the store by prefix, then increment."""
    return increment(open_store(prefix, storage_options), key, writer, times)
