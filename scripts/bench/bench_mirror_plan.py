"""Planning a run whose mirrored input is on a local source: what listing it costs, and the whole plan.

    uv run python scripts/bench/bench_mirror_plan.py              # 64 MiB in 32 files
    uv run python scripts/bench/bench_mirror_plan.py --mib 1024 --files 64

A local source is listed with each file's size and mtime (executor.engine.transfers.mirror): planning reads no
bytes, so its cost does not grow with the corpus; the copy hashes the files as it streams them.
Reports the best of three listings of the source and of three plans (a fresh process's first plan
includes the imports).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests package: the mirrored-input graph

import executor  # noqa: E402
from executor.core.locations import Storage  # noqa: E402
from executor.core.step import MirroredPath  # noqa: E402
from executor.engine.transfers.mirror import find_candidates  # noqa: E402
from tests.cache.mirror_graph import CORPUS, build  # noqa: E402


def timed(call, times: int = 3) -> list[float]:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        took.append(time.perf_counter() - started)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--files", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        source = Path(root, "us")
        corpus = source / "raw" / "corpus"
        corpus.mkdir(parents=True)
        for i in range(args.files):
            (corpus / f"part-{i:03d}.bin").write_bytes(os.urandom((args.mib << 20) // args.files))
        listing = timed(lambda: find_candidates(MirroredPath(CORPUS), (str(source),), Storage({})))
        plans = timed(lambda: executor.plan(build(), prefix=f"{root}/p", environ={}, mirror_sources=(str(source),)))
        print(f"{args.mib} MiB in {args.files} files: listing the source {min(listing) * 1000:.1f} ms (best of 3), "
              f"plan {min(plans):.3f} s (best of 3; first {plans[0]:.3f} s)")


if __name__ == "__main__":
    main()
