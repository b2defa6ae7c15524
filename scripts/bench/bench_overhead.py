"""Executor overhead per step: N independent trivial steps through the executor (local prefix,
Ray runner) versus the same work as N raw Ray tasks, in the same process and Ray cluster.

    uv run python scripts/bench/bench_overhead.py                  # 1,000 steps
    uv run python scripts/bench/bench_overhead.py --steps 200 --profile   # + cProfile of the executor run

The executor run includes everything a real run does: planning (reading N statuses), leasing
(create-if-absent per step), submitting, the fenced commit, record + manifest, the run file.
Per-step overhead = (executor time - raw time) / N.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from executor.engine.runner.ray_runner import prepare_loopback_environment  # noqa: E402

prepare_loopback_environment()


@dataclass(frozen=True)
class Trivial:
    index: int
    output_path: str


def trivial(config: Trivial) -> dict:
    Path(config.output_path, "out.txt").write_text(str(config.index))
    return {"index": config.index}


def raw_run(n: int, root: Path) -> float:
    import ray

    task = ray.remote(num_cpus=1, max_retries=0)(trivial)
    started = time.perf_counter()
    refs = []
    for i in range(n):
        out = root / f"raw-{i}"
        out.mkdir(parents=True, exist_ok=True)
        refs.append(task.remote(Trivial(i, str(out))))
    ray.get(refs)
    return time.perf_counter() - started


class QuietReporter:
    """Drops every event: isolates the reporter's share of the overhead (--quiet)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def executor_run(n: int, prefix: Path, max_concurrent: int, profile: bool, quiet: bool = False) -> tuple[float, str]:
    from rich.console import Console

    from executor import ExecutorStep, this_output_path
    from executor.cli import run
    from executor.tools.console_reporter import ConsoleReporter

    steps = [ExecutorStep(f"bench/t{i}", trivial, Trivial(i, this_output_path())) for i in range(n)]
    sink = io.StringIO()
    reporter = QuietReporter() if quiet else ConsoleReporter(Console(file=sink, width=200))
    argv = ["--prefix", str(prefix), "--max-concurrent", str(max_concurrent)]
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    code = run(steps, argv=argv, reporter=reporter, main_file=__file__)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"executor run failed ({code}):\n{sink.getvalue()[-3000:]}")
    report = ""
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        out.write("\n--- by own time ---\n")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
        report = out.getvalue()
    return elapsed, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max-concurrent", type=int, default=256, help="executor --max-concurrent")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="cProfile the executor run")
    parser.add_argument("--quiet", action="store_true", help="executor run with a reporter that prints nothing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from executor.engine.runner.ray_env import start_embedded

    t0 = time.perf_counter()
    start_embedded(args.num_cpus, 200 * 1024 * 1024, None)
    import ray

    ray.get([ray.remote(trivial).remote(Trivial(0, tempfile.mkdtemp())) for _ in range(4 * args.num_cpus)])  # warm workers
    ray_start = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        root = Path(tmp)
        raw = raw_run(args.steps, root / "raw")
        executed, report = executor_run(args.steps, root / "prefix", args.max_concurrent, args.profile, args.quiet)
        again_started = time.perf_counter()
        from executor.cli import run
        from executor import ExecutorStep, this_output_path
        from executor.tools.console_reporter import ConsoleReporter
        from rich.console import Console

        steps = [ExecutorStep(f"bench/t{i}", trivial, Trivial(i, this_output_path())) for i in range(args.steps)]
        run(steps, argv=["--prefix", str(root / "prefix")], reporter=ConsoleReporter(Console(file=io.StringIO())),
            main_file=__file__)
        noop = time.perf_counter() - again_started
    ray.shutdown()
    result = {
        "steps": args.steps, "quiet_reporter": args.quiet, "max_concurrent": args.max_concurrent, "ray_cpus": args.num_cpus,
        "ray_start_s": round(ray_start, 2), "raw_ray_tasks_s": round(raw, 3), "executor_s": round(executed, 3),
        "overhead_ms_per_step": round((executed - raw) / args.steps * 1000, 2),
        "executor_ms_per_step": round(executed / args.steps * 1000, 2),
        "raw_ms_per_task": round(raw / args.steps * 1000, 2),
        "noop_rerun_s": round(noop, 3), "load_avg": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v}")
        if report:
            print(report)


if __name__ == "__main__":
    main()
