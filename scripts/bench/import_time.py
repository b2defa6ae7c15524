"""Import time of `executor` and of the command-line entry, each in fresh interpreters.

    uv run python scripts/bench/import_time.py [--repeats 15] [--python PYTHON] [--json]

Each figure is the median of `--repeats` fresh subprocesses, timed inside the child around the
import alone (interpreter start excluded), so it reads as what `import executor` costs a script, a
Ray worker or a notebook. Measured: `import executor` (the lazy package root), `from executor import
executor_main` (what an experiment file does), `import executor.__main__` (the `stepgraph`
command), and `import steps` (the step library's root). `--python` measures another environment
(e.g. a lean install without extras); `python -X importtime -c "import executor.__main__"` shows
where the time goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = {
    "import executor": "import executor",
    "from executor import executor_main": "from executor import executor_main",
    "import executor.__main__ (the CLI)": "import executor.__main__",
    "import steps": "import steps",
}
CHILD = "import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"


def seconds(python: str, code: str, repeats: int) -> list[float]:
    """`repeats` fresh interpreters, each timing `code` once from the inside."""
    times = []
    for _ in range(repeats):
        done = subprocess.run([python, "-c", CHILD.format(code=code)], capture_output=True, text=True,
                              cwd=REPO, check=True)
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure (default: this one)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = parser.parse_args()
    figures = {}
    for name, code in CASES.items():
        times = seconds(args.python, code, args.repeats)
        figures[name] = {"median_ms": round(statistics.median(times) * 1000, 1),
                         "min_ms": round(min(times) * 1000, 1), "max_ms": round(max(times) * 1000, 1)}
    if args.json:
        print(json.dumps({"python": args.python, "repeats": args.repeats, "figures": figures}))
        return
    print(f"{args.python}, median of {args.repeats} fresh interpreters (min - max):")
    for name, f in figures.items():
        print(f"  {name:40s} {f['median_ms']:7.1f} ms  ({f['min_ms']:.1f} - {f['max_ms']:.1f})")


if __name__ == "__main__":
    main()
