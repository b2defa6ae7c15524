"""Benchmark of the coordination stores: what a lease costs per step, and listing vs reading statuses.

1. Lease overhead per step on each backend (local, GCS emulator, S3 emulator): create + 4
   heartbeat CAS + commit CAS + read. Round trips are counted at the HTTP level by a loopback
   proxy in front of the emulator; milliseconds are measured without the proxy.
2. Planning cost against the GCS emulator behind a proxy adding a fixed latency per HTTP request:
   one `list_generations` over N status objects vs N sequential reads (and, for reference, the
   same reads on a pool of 16 threads).

    uv run python scripts/bench/bench_store.py                  # full run (~4-5 min: 10,000 reads x 20 ms)
    uv run python scripts/bench/bench_store.py --objects 2000   # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: tests.emulators

from executor.engine.store import CoordinationStore, open_store  # noqa: E402
from tests.emulators import Emulator, running_gcs_emulator, running_s3_emulator  # noqa: E402

STATUS_SUFFIX = "/.executor/status.json"
HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"PATCH ")


class LatencyProxy:
    """A loopback TCP proxy that delays each HTTP request by `latency_s` and counts requests.

    A request is a client->server chunk starting with an HTTP method; body chunks that follow
    (large uploads, `Expect: 100-continue`) pass without delay and are not counted.
    """

    def __init__(self, upstream_url: str, latency_s: float):
        host_port = upstream_url.split("://", 1)[1]
        self.upstream_host, port = host_port.rsplit(":", 1)
        self.upstream_port, self.latency_s = int(port), latency_s
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    async def _connection(self, client_reader, client_writer) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)

        async def to_upstream():
            while data := await client_reader.read(1 << 16):
                if data.startswith(HTTP_METHODS):
                    self.requests += 1
                    if self.latency_s:
                        await asyncio.sleep(self.latency_s)
                upstream_writer.write(data)
                await upstream_writer.drain()
            upstream_writer.close()

        async def to_client():
            while data := await upstream_reader.read(1 << 16):
                client_writer.write(data)
                await client_writer.drain()
            client_writer.close()

        await asyncio.gather(to_upstream(), to_client(), return_exceptions=True)


def status_bytes(state: str, seq: int, owner: str = "bench-host:1234") -> bytes:
    return json.dumps({"schema": 1, "status": state, "seq": seq, "owner": owner}).encode()


def lease_lifecycle(store: CoordinationStore, key: str, heartbeats: int = 4) -> int:
    """create, `heartbeats` CAS renewals, the commit CAS, a read; returns the number of calls."""
    generation = store.create_if_absent(key, status_bytes("RUNNING", 0))
    assert generation is not None, key
    for seq in range(1, heartbeats + 1):
        generation = store.replace_if_generation(key, status_bytes("RUNNING", seq), generation)
        assert generation is not None, key
    generation = store.replace_if_generation(key, status_bytes("SUCCESS", heartbeats + 1), generation)
    assert generation is not None and store.read(key).generation == generation
    return heartbeats + 3


def bench_lease(name: str, make_store, steps: int, counting_store=None, proxy=None) -> dict:
    store = make_store()
    lease_lifecycle(store, "warmup/.executor/status.json")  # connections, clients, imports
    times = []
    for i in range(steps):
        started = time.perf_counter()
        calls = lease_lifecycle(store, f"step-{i:05d}{STATUS_SUFFIX}")
        times.append((time.perf_counter() - started) * 1000)
    round_trips = calls
    if counting_store is not None:  # count real HTTP requests through the proxy
        before = proxy.requests
        counted_steps = 10
        for i in range(counted_steps):
            lease_lifecycle(counting_store, f"counted-{i:05d}{STATUS_SUFFIX}")
        round_trips = (proxy.requests - before) / counted_steps
    times.sort()
    return {"backend": name, "steps": steps, "calls_per_step": calls, "round_trips_per_step": round_trips,
            "ms_per_step_mean": statistics.mean(times), "ms_per_step_p50": times[len(times) // 2],
            "ms_per_step_p95": times[int(len(times) * 0.95)]}


def bench_planning(emulator: Emulator, objects: int, reads: int, latency_s: float) -> dict:
    prefix = emulator.fresh_prefix("plan")
    direct = open_store(prefix, emulator.storage_options)
    keys = [f"step-{i:05d}{STATUS_SUFFIX}" for i in range(objects)]
    with ThreadPoolExecutor(16) as pool:  # populate without the added latency
        list(pool.map(lambda k: direct.create_if_absent(k, status_bytes("SUCCESS", 1)), keys))

    proxy = LatencyProxy(emulator.endpoint_url, latency_s)
    slow = open_store(prefix, {**emulator.storage_options, "endpoint_url": proxy.url})
    slow.read(keys[0])  # open the connection pool

    before, started = proxy.requests, time.perf_counter()
    listed = slow.list_generations("", STATUS_SUFFIX)
    list_s, list_requests = time.perf_counter() - started, proxy.requests - before
    assert len(listed) == objects, len(listed)
    print(f"       list_generations over {objects} objects: {list_s:.2f} s in {list_requests} requests; "
          f"now {reads} sequential reads...", flush=True)

    before, started = proxy.requests, time.perf_counter()
    for key in keys[:reads]:
        slow.read(key)
    read_s, read_requests = time.perf_counter() - started, proxy.requests - before
    read_s_for_all = read_s * objects / reads

    started = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(slow.read, keys))
    pool_s = time.perf_counter() - started
    return {"objects": objects, "latency_ms": latency_s * 1000,
            "list_s": list_s, "list_requests": list_requests,
            "sequential_reads": reads, "sequential_read_s": read_s, "sequential_read_requests": read_requests,
            "sequential_read_s_for_all": read_s_for_all, "speedup_list_vs_sequential": read_s_for_all / list_s,
            "pool16_read_s": pool_s, "speedup_list_vs_pool16": pool_s / list_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="lease lifecycles per backend")
    parser.add_argument("--objects", type=int, default=10_000, help="status objects to plan over")
    parser.add_argument("--reads", type=int, default=None,
                        help="sequential reads actually made (default: all); the rest is extrapolated")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per HTTP request")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    results: dict = {"lease": []}
    with tempfile.TemporaryDirectory() as scratch, running_gcs_emulator() as gcs, running_s3_emulator() as s3:
        results["lease"].append(bench_lease("local", lambda: open_store(f"{scratch}/lease"), args.steps))
        for emulator in (gcs, s3):
            prefix = emulator.fresh_prefix("lease")
            proxy = LatencyProxy(emulator.endpoint_url, 0.0)
            counting = open_store(prefix, {**emulator.storage_options, "endpoint_url": proxy.url})
            direct = open_store(prefix, emulator.storage_options)
            results["lease"].append(bench_lease(f"{emulator.scheme} emulator", lambda store=direct: store,
                                                args.steps, counting, proxy))
        for row in results["lease"]:
            print(f"lease  {row['backend']:<14} {row['round_trips_per_step']:.1f} round trips/step "
                  f"({row['calls_per_step']} store calls)  mean {row['ms_per_step_mean']:.1f} ms  "
                  f"p50 {row['ms_per_step_p50']:.1f} ms  p95 {row['ms_per_step_p95']:.1f} ms  "
                  f"over {row['steps']} steps", flush=True)

        plan = bench_planning(gcs, args.objects, args.reads or args.objects, args.latency_ms / 1000)
        results["planning"] = plan
        print(f"plan   GCS emulator + {plan['latency_ms']:.0f} ms/request, {plan['objects']} status objects:")
        print(f"       list_generations: {plan['list_s']:.2f} s in {plan['list_requests']} requests")
        extrapolated = "" if plan["sequential_reads"] == plan["objects"] else \
            f" ({plan['sequential_reads']} made in {plan['sequential_read_s']:.1f} s, extrapolated)"
        print(f"       sequential reads: {plan['sequential_read_s_for_all']:.1f} s in "
              f"{plan['sequential_read_requests']} requests{extrapolated}  -> listing is "
              f"{plan['speedup_list_vs_sequential']:.0f}x faster")
        print(f"       reads on 16 threads: {plan['pool16_read_s']:.1f} s -> listing is "
              f"{plan['speedup_list_vs_pool16']:.1f}x faster")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
