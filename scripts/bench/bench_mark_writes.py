"""What lineage markers cost a real run: the same graph run with and without them, runs alternated.

    uv run python scripts/bench/bench_mark_writes.py --gcs              # on fake-gcs-server
    uv run python scripts/bench/bench_mark_writes.py --s3 --steps 200   # on the moto S3 emulator
    uv run python scripts/bench/bench_mark_writes.py                    # on local disk

Each run is `api.run` on the inline runner into a fresh prefix: planning, leases, the steps, the fenced
commits, the run file. The graph: a root read by `--width` chains (every step but the root reads one
output, so its commit leaves 2 markers: executor/engine/run/mark_writer.py writes them off the run loop,
and the run drains them before it returns). "without" is the same run with the writer's `submit` made
a no-op in this process. One run is made first and not counted (the first run of a process pays for
its imports). Reports each run's wall time and CPU time (this process, all its threads;
and the emulator's process, read from /proc), then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
import tempfile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from executor import ExecutorStep, api, output_path_of, this_output_path  # noqa: E402
from executor.engine.run import mark_writer  # noqa: E402


@dataclass(frozen=True)
class Link:
    index: int
    previous: str | None
    output_path: str


def link(config: Link) -> int:
    return config.index


def _graph(n: int, width: int) -> list[ExecutorStep]:
    root = ExecutorStep("bench/root", link, Link(0, None, this_output_path()))
    leaves, per_chain = [], max(1, (n - 1) // width)
    for c in range(width):
        previous = root
        for i in range(per_chain):
            previous = ExecutorStep(f"bench/c{c}-{i}", link, Link(i + 1, output_path_of(previous), this_output_path()))
        leaves.append(previous)
    return leaves


def _children_cpu() -> float:
    """CPU seconds of this process's live child processes (the emulator), from /proc."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(os.getpid()):
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _one(steps: list[ExecutorStep], prefix: str, options: dict | None, markers: bool) -> tuple[float, float, float]:
    submit = mark_writer.MarkWriter.submit
    if not markers:
        mark_writer.MarkWriter.submit = lambda self, *args, **kwargs: None
    try:
        wall, cpu, other = time.perf_counter(), time.process_time(), _children_cpu()
        result = api.run(steps, prefix=prefix, runner="inline", storage_options=options)
        wall, cpu, other = time.perf_counter() - wall, time.process_time() - cpu, _children_cpu() - other
    finally:
        mark_writer.MarkWriter.submit = submit
    assert result.ok, result.failed
    return wall, cpu, other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, alternated")
    parser.add_argument("--s3", action="store_true", help="on the moto S3 emulator (tests/emulators.py)")
    parser.add_argument("--gcs", action="store_true", help="on fake-gcs-server (tests/emulators.py)")
    args = parser.parse_args()
    steps = _graph(args.steps, args.width)
    with ExitStack() as stack:
        if args.s3 or args.gcs:
            from tests.emulators import running_gcs_emulator, running_s3_emulator

            emulator = stack.enter_context(running_s3_emulator() if args.s3 else running_gcs_emulator())
            fresh, options = emulator.fresh_prefix, emulator.storage_options
        else:
            scratch = stack.enter_context(tempfile.TemporaryDirectory())
            fresh, options = (lambda label: f"{scratch}/{label}-{time.monotonic_ns()}"), None
        _one(steps, fresh("warmup"), options, True)  # not counted: the process's first run pays its imports
        found: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
        for repeat in range(args.repeats):
            for markers in ((True, False) if repeat % 2 == 0 else (False, True)):
                found[markers].append(_one(steps, fresh("marks"), options, markers))
                wall, cpu, other = found[markers][-1]
                print(f"{'with' if markers else 'without':>7} markers: {len(steps) and args.steps} steps, "
                      f"wall {wall:.2f}s, cpu {cpu:.2f}s here + {other:.2f}s emulator", flush=True)
        medians = {m: [statistics.median(r[i] for r in runs) for i in range(3)] for m, runs in found.items()}
        for i, what in enumerate(("wall", "cpu here", "cpu emulator")):
            with_, without = medians[True][i], medians[False][i]
            print(f"median {what}: with {with_:.2f}s, without {without:.2f}s, "
                  f"ratio {with_ / without if without else float('nan'):.2f}")


if __name__ == "__main__":
    main()
