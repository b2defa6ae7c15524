"""The cloud stores' connections: made once per store, shared by its threads, closed when it goes away."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import aiobotocore.session
import aiohttp
import psutil

from executor.engine.store import open_store
from executor.engine.store.gcs import _close_session


def test_threads_first_using_one_s3_store_at_once_make_one_client(s3_emulator, monkeypatch):
    """Every runner thread shares its prefix's store; the first requests of 8 threads at once must
    not each make an aiobotocore client (a connection pool apiece, never closed)."""
    made = []
    create_client = aiobotocore.session.AioSession.create_client

    class SlowToEnter:
        """Making the client waits, as it does when credentials come over the network (the
        default chain asks the instance metadata service): the other threads' requests get in."""

        def __init__(self, creator):
            self.creator = creator

        async def __aenter__(self):
            await asyncio.sleep(0.05)
            return await self.creator.__aenter__()

        async def __aexit__(self, *exc):
            return await self.creator.__aexit__(*exc)

    def counting_create_client(self, *args, **kwargs):
        made.append(threading.get_ident())
        return SlowToEnter(create_client(self, *args, **kwargs))

    monkeypatch.setattr(aiobotocore.session.AioSession, "create_client", counting_create_client)
    # a filesystem of its own: fsspec caches S3FileSystem instances, and an earlier test's has its client
    options = {**s3_emulator.storage_options, "skip_instance_cache": True}
    store = open_store(s3_emulator.fresh_prefix("client"), options)
    barrier = threading.Barrier(8)
    found = []

    def first_read(i: int) -> None:
        barrier.wait()
        found.append(store.read(f"k{i}"))

    threads = [threading.Thread(target=first_read, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [None] * 8
    assert len(made) == 1, f"{len(made)} clients made for one store"


def _established_to(port: int) -> set[tuple[str, int]]:
    """This process's open TCP connections to a loopback port (by local address)."""
    return {tuple(c.laddr) for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}


def test_a_gcs_store_that_goes_away_closes_its_connections(gcs_emulator):
    """A long run opens a store per prefix it touches (the CLI's tools, every cache source): each one
    dropped must close its HTTP session, or its kept-alive connections stay open for the process."""
    port = int(gcs_emulator.endpoint_url.rsplit(":", 1)[1])
    before = _established_to(port)
    store = open_store(gcs_emulator.fresh_prefix("session"), gcs_emulator.storage_options)
    assert store.read("k") is None
    ours = _established_to(port) - before
    assert ours, "the read left no kept-alive connection: the test proves nothing"
    del store
    gc.collect()
    deadline = time.monotonic() + 10
    while ours & _established_to(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ours & _established_to(port), "the dropped store's session was never closed"


def test_closing_a_gcs_session_while_its_loop_closes_raises_nothing():
    """At interpreter exit a store's finaliser may run as fsspec's loop shuts down: the loop still
    reads as running, then refuses the callback. Closing then is impossible and must stay quiet."""

    class ClosingLoop(asyncio.SelectorEventLoop):
        closing = False

        def is_running(self) -> bool:  # the moment between the finaliser's check and its call
            return self.closing or super().is_running()

    loop = ClosingLoop()
    session = aiohttp.ClientSession(loop=loop)
    loop.close()
    loop.closing = True
    _close_session(loop, session)  # loop.call_soon_threadsafe raises RuntimeError: swallowed
    assert not session.closed
