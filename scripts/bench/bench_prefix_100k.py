"""A prefix of 100,000 steps (issue 50): the dry run of the DAG, and `stepgraph serve`'s first byte.

    uv run python scripts/bench/bench_prefix_100k.py [--steps 100000] [--requests 3] [--baseline DIR]

The DAG is bench_plan_marin.py's (seeded, 1-3 parents per step, a 30-field config), declared by a
fresh `python` process on its `experiment` entry point, so interpreter start, imports, building the
steps, hashing, status reads, planning and printing the JSON are all in the figures:

    dry-empty  --dry-run --json on an empty prefix (its plan gives every step's output path)
    dry-done   --dry-run --json with every step complete                 target wall <= 5 s
    run-done   the same through `python -m executor run FILE ...` (`stepgraph run`): the command line
               owns the process from the start, so the steps are declared with the cyclic garbage
               collector paused (a file run as `python FILE` declares them before executor_main is
               called, where the library leaves the collector as the user has it)
    serve      `python -m executor serve` on that complete prefix: start (to its printed URL),
               time to the first byte of `GET /` (first request and median of --requests;
               target <= 1 s), and the server's memory (VmRSS) after them

"Complete" is a SUCCESS status.json per step as a real run of the checkout writes it (digest, step id,
the code fingerprint's digest), written straight to disk: no lock files, no run per step, so the
100,000-step prefix takes seconds to make rather than minutes (a live view reads statuses, not
locks). Wall time on a shared machine also counts waiting for a core: CPU time (user + sys) of each
process is printed beside it, and each dry run's peak RSS. `--baseline DIR` runs the same on
another checkout (e.g. `git archive main | tar -x -C DIR`), its runs interleaved with this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_plan_marin import timed  # noqa: E402
from bench_serve import RUN_ID, cpu_s, rss_mb, timed_get  # noqa: E402


def write_statuses(prefix: str, plan: dict, fingerprint: str, pythonpath: str | None) -> float:
    """A SUCCESS status per step of `plan`, written by the checkout being timed; seconds taken."""
    script = ("import json, os, sys, time\n"
              "from executor.core.record import Owner, State, Status, status_key\n"
              "prefix, fingerprint = sys.argv[1], sys.argv[2]\n"
              "owner = Owner('bench', 'host', 1, 'user')\n"
              "for row in json.load(sys.stdin)['steps']:\n"
              "    key = os.path.join(prefix, status_key(row['output_path'][len(prefix) + 1:]))\n"
              "    os.makedirs(os.path.dirname(key), exist_ok=True)\n"
              "    data = Status(State.SUCCESS, row['digest'], row['step_id'], 1, 1, owner, time.time(),\n"
              "                  function_sha256=fingerprint).to_bytes()\n"
              "    with open(key, 'wb') as f:\n"
              "        f.write(data)\n")
    began = time.monotonic()
    env = {**os.environ, "PYTHONPATH": pythonpath or str(REPO)}
    subprocess.run([sys.executable, "-c", script, prefix, fingerprint], input=json.dumps(plan), text=True,
                   env=env, check=True)
    run = {"schema": 1, "run_id": RUN_ID, "experiment": "bench", "started_at": time.time() - 60,
           "finished_at": None, "invocation": {"user": "bench", "host": "bench-host", "argv": ["bench.py"]},
           "steps": [], "plan": [], "graph": {}, "outcome": {}, "ran_here": []}
    os.makedirs(os.path.join(prefix, "runs"), exist_ok=True)
    Path(prefix, "runs", f"bench-{RUN_ID}.json").write_text(json.dumps(run))
    return time.monotonic() - began


def timed_rss(cmd: list[str], pythonpath: str | None) -> tuple[float, float, float, str]:
    """Wall and CPU (user + sys) seconds, peak RSS (MB) and stdout of one run of `cmd`, run in the
    checkout timed (`python -m executor` puts the working directory first on the path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        process = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=pythonpath or REPO)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own rusage (ru_maxrss in KiB on Linux)
        wall = time.perf_counter() - began
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {process.returncode}:\n{err.read().decode()[-3000:]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read().decode()


def serve(prefix: str, pythonpath: str | None, requests: int) -> dict:
    """Start `executor serve` on the prefix; its start, first bytes, CPU and memory."""
    env = {**os.environ, "PYTHONPATH": pythonpath or str(REPO)}
    began = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "executor", "serve", "--prefix", prefix, "--port", "0"],
                               cwd=pythonpath or REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
    try:
        url = None
        for line in process.stdout:
            if line.startswith("open: "):
                url = line.strip().removeprefix("open: ")
                break
        if url is None:
            raise SystemExit(f"the server exited ({process.wait()}) without printing its URL")
        start = time.monotonic() - began
        threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
        port = int(url.split(":")[2].split("/")[0])
        cookie = f"stepgraph-token-{port}={url.split('token=')[1]}"
        firsts = [timed_get(port, cookie)[0] for _ in range(requests)]
        return {"start": start, "ttfb": firsts,
                "cpu": cpu_s(process.pid), "rss": rss_mb(process.pid)}
    finally:
        process.terminate()
        process.wait(timeout=60)


def measure(checkouts: dict[str, str | None], steps: int, requests: int, tmp: str) -> dict:
    me = [sys.executable, str(HERE / "bench_plan_marin.py"), "experiment", str(steps), "--dry-run", "--json"]
    out: dict = {label: {} for label in checkouts}
    for i, (label, path) in enumerate(checkouts.items()):
        timed(me[:3] + ["50", "--dry-run", "--json", "--prefix", os.path.join(tmp, "warm")], path)  # bytecode
        prefix = os.path.join(tmp, f"prefix-{i}")
        wall, cpu, rss, text = timed_rss(me + ["--prefix", prefix], path)
        out[label]["dry-empty"] = (wall, cpu, rss)
        plan = json.loads(text)
        assert len(plan["steps"]) == steps and not os.path.exists(prefix), "a dry run writes nothing"
        fingerprint = timed([sys.executable, str(HERE / "bench_plan_marin.py"), "fingerprint"], path)[2].strip()
        out[label]["write"] = write_statuses(prefix, plan, fingerprint, path)
    for i, (label, path) in enumerate(checkouts.items()):
        prefix = os.path.join(tmp, f"prefix-{i}")
        wall, cpu, rss, text = timed_rss(me + ["--prefix", prefix], path)
        assert {r["action"] for r in json.loads(text)["steps"]} == {"skip"}, "every step must be complete"
        out[label]["dry-done"] = (wall, cpu, rss)
        wall, cpu, rss, ran = timed_rss([sys.executable, "-m", "executor", "run", *me[1:], "--prefix", prefix], path)
        assert ran == text, "`stepgraph run FILE` prints the plan `python FILE` prints"
        out[label]["run-done"] = (wall, cpu, rss)
    for i, (label, path) in enumerate(checkouts.items()):
        out[label]["serve"] = serve(os.path.join(tmp, f"prefix-{i}"), path, requests)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--baseline", help="another checkout to time side by side")
    args = parser.parse_args()
    checkouts = {"this checkout": None}
    if args.baseline:
        checkouts = {"baseline": os.path.abspath(args.baseline), "this checkout": None}
    with tempfile.TemporaryDirectory(prefix="bench-100k-") as tmp:
        runs = measure(checkouts, args.steps, args.requests, tmp)
    print(f"{args.steps} steps; wall s / cpu s (user + sys); peak RSS of each")
    for label, r in runs.items():
        s = r["serve"]
        print(f"[{label}]  statuses written in {r['write']:.1f} s")
        for mode, target in (("dry-empty", ""), ("dry-done", "   target wall <= 5 s"), ("run-done", "")):
            wall, cpu, rss = r[mode]
            print(f"  {mode:<10} {wall:7.2f} / {cpu:5.2f} s   peak RSS {rss:6.0f} MB{target}")
        print(f"  serve      start {s['start']:.2f} s; first byte of GET / {s['ttfb'][0] * 1000:.0f} ms (first request), "
              f"{statistics.median(s['ttfb']) * 1000:.0f} ms median of {len(s['ttfb'])} (target <= 1000 ms); "
              f"server cpu {s['cpu']:.2f} s, RSS {s['rss']:.0f} MB")


if __name__ == "__main__":
    main()
