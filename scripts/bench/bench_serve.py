"""`stepgraph serve` on a big prefix: time to the overview's first byte, and memory over a soak.

    uv run python scripts/bench/bench_serve.py [--steps 10000] [--requests 5] [--soak-s 60] [--keep DIR]

A local prefix of --steps statuses (as runs write them: one run file, 1% FAILED, 50 RUNNING, the
rest SUCCESS) is served by a real `python -m executor serve --port 0` process. Printed:

    start      from the process's start to its printed URL (imports + the first full read)
    ttfb       request sent -> first byte of `GET /` (the token cookie set), first request and
               median of --requests; the issue-31 target is <= 1 s at 10,000 steps on a local disk
    full       request sent -> last byte of the same responses, and their size (200 rows a page)
    soak       with one live page (an /events stream) open, a writer renews the 50 RUNNING leases
               every second and flips 10 steps RUNNING <-> SUCCESS every 5 s, for --soak-s
               seconds; the server's RSS (VmRSS) is sampled every 5 s: first, last, max, and
               the slope after the first minute (MB per 10 min). Memory held is one row per step
               and per run, so it should stay flat (the issue's "for an hour": --soak-s 3600).

Wall times on a shared machine include waiting for a core; CPU time of the server is printed too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from executor.core.record import Owner, State, Status  # noqa: E402
from executor.engine.store import open_store  # noqa: E402

RUN_ID = "20261205T000000Z-bench0"
RUNNING = 50


def step_id(i: int) -> str:
    return f"bench/step{i:05d}-{i:012x}"


def make_prefix(root: Path, steps: int) -> Path:
    store = open_store(str(root))
    owner = Owner(RUN_ID, "bench-host", 1, "bench")
    now = time.time()
    for i in range(steps):
        state = State.RUNNING if i < RUNNING else State.FAILED if i % 100 == 99 else State.SUCCESS
        status = Status(state, f"{i:064x}", step_id(i), seq=0, attempt=1, owner=owner, written_at=now,
                        started_at=now - 10, error="ValueError: bench" if state == State.FAILED else None)
        store.create_if_absent(f"{step_id(i)}/.executor/status.json", status.to_bytes())
    run = {"schema": 1, "run_id": RUN_ID, "experiment": "bench", "started_at": now - 60, "finished_at": None,
           "invocation": {"user": "bench", "host": "bench-host", "argv": ["bench.py"]},
           "steps": [], "plan": [], "graph": {}, "outcome": {}, "ran_here": []}
    (root / "runs").mkdir()
    (root / "runs" / f"bench-{RUN_ID}.json").write_text(json.dumps(run))
    return root


def start_server(prefix: Path) -> tuple[subprocess.Popen, str, float]:
    began = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "executor", "serve", "--prefix", str(prefix), "--port", "0"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    for line in process.stdout:
        if line.startswith("open: "):
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, line.strip().removeprefix("open: "), time.monotonic() - began
    raise SystemExit(f"the server exited ({process.wait()}) without printing its URL")


def timed_get(port: int, cookie: str, path: str = "/") -> tuple[float, float, int]:
    """(seconds to the first byte, seconds to the last, bytes) of one GET."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    began = time.perf_counter()
    connection.request("GET", path, headers={"Cookie": cookie})
    response = connection.getresponse()  # returns once the status line (the first bytes) arrived
    first = time.perf_counter() - began
    body = response.read()
    assert response.status == 200, response.status
    connection.close()
    return first, time.perf_counter() - began, len(body)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def writer(prefix: Path, stop: threading.Event) -> None:
    """Renew the RUNNING leases every second; flip 10 steps RUNNING <-> SUCCESS every 5 s."""
    store = open_store(str(prefix))
    tick = 0
    while not stop.wait(1.0):
        tick += 1
        flipping = range(RUNNING, RUNNING + 10) if tick % 5 == 0 else range(0)
        for i in [*range(RUNNING), *flipping]:
            key = f"{step_id(i)}/.executor/status.json"
            current = store.read(key)
            data = json.loads(current.data)
            state = State(data["state"])
            if i >= RUNNING:
                state = State.SUCCESS if state == State.RUNNING else State.RUNNING
            status = Status(state, data["digest"], data["step_id"], seq=data["seq"] + 1, attempt=data["attempt"],
                            owner=Owner(RUN_ID, "bench-host", 1, "bench"), written_at=time.time(),
                            started_at=data["started_at"])
            store.replace_if_generation(key, status.to_bytes(), current.generation)


def live_page(port: int, cookie: str, stop: threading.Event, counter: list[int]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/", headers={"Cookie": cookie})
    page = connection.getresponse().read().decode()
    since = page.split('data-since="', 1)[1].split('"', 1)[0]  # as the page's script subscribes
    connection.request("GET", f"/events?view=overview&since={since}", headers={"Cookie": cookie})
    response = connection.getresponse()
    while not stop.is_set():
        line = response.fp.readline()
        if not line:
            break
        if line.startswith(b"event: "):
            counter[0] += 1
    connection.close()


def soak(process: subprocess.Popen, prefix: Path, port: int, cookie: str, seconds: float) -> None:
    stop, counter = threading.Event(), [0]
    threads = [threading.Thread(target=writer, args=(prefix, stop), daemon=True),
               threading.Thread(target=live_page, args=(port, cookie, stop, counter), daemon=True)]
    for t in threads:
        t.start()
    samples: list[tuple[float, float]] = []
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < seconds:
        samples.append((elapsed, rss_mb(process.pid)))
        time.sleep(min(5.0, max(0.0, seconds - elapsed)))
    samples.append((time.monotonic() - began, rss_mb(process.pid)))
    stop.set()
    later = [(t, m) for t, m in samples if t >= 60] or samples
    slope = 0.0
    if len(later) > 2:
        ts, ms = [t for t, _ in later], [m for _, m in later]
        mean_t, mean_m = statistics.fmean(ts), statistics.fmean(ms)
        slope = sum((t - mean_t) * (m - mean_m) for t, m in later) / sum((t - mean_t) ** 2 for t in ts) * 600
    print(f"soak       {seconds:.0f} s, {counter[0]} live events received; server RSS first "
          f"{samples[0][1]:.1f} MB, last {samples[-1][1]:.1f} MB, max {max(m for _, m in samples):.1f} MB; "
          f"slope after the first minute {slope:+.2f} MB per 10 min")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--soak-s", type=float, default=60.0)
    parser.add_argument("--keep", help="build the prefix here (kept) instead of a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(args.keep or tmp) / "prefix"
        began = time.monotonic()
        prefix = make_prefix(root, args.steps)
        print(f"prefix     {args.steps} steps under {prefix} ({time.monotonic() - began:.1f} s to write)")
        process, url, start_s = start_server(prefix)
        try:
            port = int(url.split(":")[2].split("/")[0])
            cookie = f"stepgraph-token-{port}={url.split('token=')[1]}"
            print(f"start      {start_s:.2f} s to the printed URL (imports + reading {args.steps} statuses)")
            times = [timed_get(port, cookie) for _ in range(args.requests)]
            firsts = [t[0] for t in times]
            print(f"ttfb       first request {firsts[0] * 1000:.0f} ms, median {statistics.median(firsts) * 1000:.0f} ms "
                  f"(target <= 1000 ms)")
            print(f"full       first {times[0][1] * 1000:.0f} ms, median {statistics.median(t[1] for t in times) * 1000:.0f}"
                  f" ms, {times[0][2] / 1024:.0f} KiB a page")
            print(f"cpu        server so far {cpu_s(process.pid):.2f} s")
            if args.soak_s > 0:
                soak(process, prefix, port, cookie, args.soak_s)
                first, _, _ = timed_get(port, cookie)
                print(f"after      ttfb {first * 1000:.0f} ms; server cpu {cpu_s(process.pid):.1f} s")
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
