"""Wall time of a no-op re-run of experiments/hello.py (everything already succeeded).

    uv run python scripts/bench/bench_noop_rerun.py [--repeats 5]

Anchors measured in the same run: a bare `python -c pass` and `python -c "import executor"`, so
the figure can be read as interpreter start + import + plan. Target: under 1.5 s wall.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "experiments" / "hello.py"


def wall(cmd: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run([sys.executable, str(HELLO), "--prefix", prefix, "--runner", "inline"],
                       check=True, capture_output=True, cwd=REPO)
        python = wall([sys.executable, "-c", "pass"], args.repeats)
        imports = wall([sys.executable, "-c", "import executor"], args.repeats)
        rerun = wall([sys.executable, str(HELLO), "--prefix", prefix], args.repeats)
        out = subprocess.run([sys.executable, str(HELLO), "--prefix", prefix], check=True,
                             capture_output=True, text=True, cwd=REPO).stdout
    assert "nothing to do" in out, out
    print(f"python -c pass          {python:6.3f} s")
    print(f"python -c 'import executor' {imports:6.3f} s")
    print(f"no-op re-run (hello.py) {rerun:6.3f} s  = {rerun / python:.1f}x bare interpreter start, "
          f"{rerun - imports:+.3f} s over importing executor")
    print(f"target: under 1.5 s -> {'met' if rerun < 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
