"""The live view's picture of a prefix (executor/tools/serve/watch.py): an update costs one listing
of statuses and one of runs/ plus reads of only what changed; what it holds does not grow with the
number of updates; a page rendered at refresh N catches up on exactly what changed after N."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from executor.core.record import Owner, State, Status
from executor.engine.store import open_store
from executor.tools.serve.source import PrefixSource
from executor.tools.serve.watch import Watcher
from executor.engine.prefix.prefixes import open_prefix


class CountingStore:
    """The real store, with every call (and every key read) counted."""

    def __init__(self, store):
        self.store, self.calls, self.keys = store, Counter(), []
        self.root = store.root

    def list_generations(self, prefix, suffix):
        self.calls["list"] += 1
        return self.store.list_generations(prefix, suffix)

    def read(self, key):
        self.calls["read"] += 1
        self.keys.append(key)
        return self.store.read(key)

    def read_many(self, keys):
        keys = list(keys)
        self.calls["read_many"] += 1
        self.keys += keys
        return self.store.read_many(keys)


def write_steps(prefix: Path, n: int) -> dict[str, str]:
    """n RUNNING statuses; step id -> generation."""
    store = open_store(str(prefix))
    owner = Owner("run-1", "host", 1, "me")
    return {f"s/step{i}-{i:012x}": store.create_if_absent(
        f"s/step{i}-{i:012x}/.executor/status.json",
        Status(State.RUNNING, f"{i:064x}", f"s/step{i}-{i:012x}", 0, 1, owner, time.time()).to_bytes())
        for i in range(n)}


def renew(prefix: Path, step_id: str, **changes) -> None:
    store = open_store(str(prefix))
    key = f"{step_id}/.executor/status.json"
    current = store.read(key)
    from executor.core.record import parse_status

    status = parse_status(current.data, key).next(written_at=time.time(), **changes)
    assert store.replace_if_generation(key, status.to_bytes(), current.generation)


def watcher_on(prefix: Path) -> tuple[Watcher, CountingStore]:
    source = PrefixSource(open_prefix(str(prefix)))
    counting = CountingStore(source.view.store)
    source.view.store = counting
    return Watcher(source, interval_s=0.01), counting


def test_an_update_lists_three_times_and_reads_only_what_changed(tmp_path):
    ids = sorted(write_steps(tmp_path, 100))
    watcher, store = watcher_on(tmp_path)
    asyncio.run(watcher.refresh())
    assert len(store.keys) == 100 and len(watcher.steps) == 100
    store.calls.clear()
    store.keys.clear()
    renew(tmp_path, ids[7])
    renew(tmp_path, ids[42], state=State.SUCCESS)
    change = asyncio.run(watcher.refresh())
    assert store.calls["list"] == 3  # the statuses, tags/ and runs/
    assert sorted(store.keys) == sorted(f"{i}/.executor/status.json" for i in (ids[7], ids[42]))
    assert change.steps == {ids[7], ids[42]} and not change.runs
    assert watcher.step(ids[42]).state == State.SUCCESS
    store.keys.clear()
    assert not asyncio.run(watcher.refresh()) and store.keys == []  # nothing changed: nothing read


def test_a_page_catches_up_on_what_changed_after_it_was_rendered(tmp_path):
    ids = sorted(write_steps(tmp_path, 10))
    watcher, _ = watcher_on(tmp_path)
    asyncio.run(watcher.refresh())
    rendered_at = watcher.refreshes
    renew(tmp_path, ids[3])
    asyncio.run(watcher.refresh())
    renew(tmp_path, ids[5])
    asyncio.run(watcher.refresh())
    assert watcher.changed_since(rendered_at).steps == {ids[3], ids[5]}
    assert watcher.changed_since(rendered_at + 1).steps == {ids[5]}
    assert not watcher.changed_since(watcher.refreshes)


def test_what_the_watcher_holds_does_not_grow_with_updates(tmp_path):
    ids = sorted(write_steps(tmp_path, 50))
    watcher = Watcher(PrefixSource(open_prefix(str(tmp_path))), interval_s=0.01)  # (a counting store would grow)

    async def rounds(n: int) -> None:
        subscription = watcher.subscribe()  # a page that never reads: it is dropped, not queued forever
        for i in range(n):
            for step_id in ids[:20]:
                renew(tmp_path, step_id)
            await watcher.refresh()
        assert subscription.overflowed and subscription not in watcher.subscriptions

    asyncio.run(rounds(70))
    gc.collect()
    tracemalloc.start()
    asyncio.run(rounds(70))
    gc.collect()
    after_70 = tracemalloc.get_traced_memory()[0]
    asyncio.run(rounds(140))
    gc.collect()
    after_210 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(watcher.steps) == len(watcher.changed_in) == len(watcher.by_step_id) == 50
    assert after_210 - after_70 < 64 * 1024, (after_70, after_210)  # 140 more updates of 20 steps


def test_a_failed_update_keeps_the_picture_and_pages_show_only_the_errors_kind(tmp_path):
    """A storage error's message may name an endpoint from the storage options: the page says its
    kind (the command prints the whole message to the operator's console)."""
    from aiohttp.test_utils import TestClient, TestServer

    from executor.engine.store import StoreError
    from executor.tools.serve.app import make_app

    ids = write_steps(tmp_path, 3)
    messages: list[str] = []
    watcher = Watcher(PrefixSource(open_prefix(str(tmp_path))), interval_s=0.01, on_error=messages.append)
    asyncio.run(watcher.refresh())

    class Unreachable:
        root = watcher.source.view.store.root

        def list_generations(self, prefix, suffix):
            raise StoreError("listing failed: http://secret-endpoint.internal:9000 refused the connection")

    watcher.source.view.store = Unreachable()
    with pytest.raises(StoreError):
        asyncio.run(watcher.refresh())

    async def fetch_overview() -> str:
        token = "a-token-of-twenty-chars"
        async with TestClient(TestServer(make_app(watcher, token, lambda: 1))) as client:
            response = await client.get(f"/?token={token}")  # the redirect sets the cookie
            assert response.status == 200
            return await response.text()

    page = asyncio.run(fetch_overview())
    assert watcher.last_error == "StoreError" and len(watcher.steps) == 3  # the last picture stays
    assert "secret-endpoint" in messages[-1]
    assert 'id="refresh-error"' in page and "StoreError" in page and "secret-endpoint" not in page
    assert all(f'data-id="{step_id}"' in page for step_id in ids)


FIRST_PICTURE = """
import asyncio, gc, sys
from executor.engine.prefix.prefixes import open_prefix
from executor.tools.serve.command import _first_picture
from executor.tools.serve.source import PrefixSource
from executor.tools.serve.watch import Watcher

watcher = Watcher(PrefixSource(open_prefix(sys.argv[1])))
collecting, refresh = [], watcher._refresh_blocking

def counted():
    collecting.append(gc.isenabled())
    if sys.argv[2] == "fails":
        raise OSError("the bucket is gone")
    return refresh()

watcher._refresh_blocking = counted
try:
    asyncio.run(_first_picture(watcher))
except OSError:
    pass
young = {id(o) for o in gc.get_objects()}  # what full collections walk (frozen objects are not listed)
print(collecting, gc.isenabled(), len(watcher.steps), sum(id(row) in young for row in watcher.steps.values()),
      gc.get_freeze_count() > 0)
"""


@pytest.mark.parametrize("refresh, expected", [
    ("reads", "[False] True 30 0 True"),  # read with the collector paused, then frozen, collector back on
    ("fails", "[False] True 0 0 False"),  # a storage error: the collector back on, nothing frozen
])
def test_serve_makes_its_first_picture_without_the_collector_then_freezes_it(tmp_path, refresh, expected):
    """`stepgraph serve` owns its process: its first picture (a row per step) is read with the collector
    paused and then frozen, so that no full collection while it serves walks 100,000 rows (they cost
    1 to 3 s of the first page's first byte). In a child process: freezing is process-wide."""
    import subprocess
    import sys

    write_steps(tmp_path, 30)
    done = subprocess.run([sys.executable, "-c", FIRST_PICTURE, str(tmp_path), refresh], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
