"""Run the README's test command several times in a row under CPU load from a second process.

    uv run python scripts/stress_suite.py                     # 5 x `uv run pytest`, one busy process beside it
    uv run python scripts/stress_suite.py --runs 3 --burners 2 -- tests/endings   # pytest arguments after --

Each run has a time limit (--run-timeout, default 30 min) and the whole loop one too (--deadline,
default 3 h), so the script always ends. The burners are plain Python busy loops (a `stress -c N`
without installing stress) started in their own process group and killed by that group at the end.
Prints one line per run (exit code, seconds) and exits 0 only if every run passed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BURN = "import itertools\nfor _ in itertools.count():\n    pass\n"


def start_burners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True) for _ in range(count)]


def stop_burners(burners: list[subprocess.Popen]) -> None:
    for proc in burners:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burners", type=int, default=1, help="busy processes running beside the suite")
    parser.add_argument("--run-timeout", type=float, default=1800, help="seconds allowed for one run")
    parser.add_argument("--deadline", type=float, default=3 * 3600, help="seconds allowed for all runs")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the first failed run")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args()

    command = ["uv", "run", "pytest", *args.pytest_args]
    print(f"{args.runs} x `{' '.join(command)}` with {args.burners} busy process(es) beside it", flush=True)
    burners = start_burners(args.burners)
    results: list[tuple[int, int, float]] = []
    loop_deadline = time.monotonic() + args.deadline
    try:
        for i in range(1, args.runs + 1):
            budget = min(args.run_timeout, loop_deadline - time.monotonic())
            if budget <= 0:
                print("deadline reached; stopping", flush=True)
                break
            started = time.monotonic()
            proc = subprocess.Popen(command, cwd=REPO, start_new_session=True)
            try:
                code = proc.wait(timeout=budget)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = 124
            seconds = time.monotonic() - started
            results.append((i, code, seconds))
            print(f"run {i}: exit {code} in {seconds:.0f}s", flush=True)
            if code != 0 and not args.keep_going:
                break
    finally:
        stop_burners(burners)
    passed = sum(code == 0 for _, code, _ in results)
    print(f"{passed}/{args.runs} runs passed: " + ", ".join(f"#{i} {c} ({s:.0f}s)" for i, c, s in results))
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
