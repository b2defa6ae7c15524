"""Benchmark of a cache-from copy (issue 30): copy_output (every file checked against the manifest)
against a plain parallel fsspec copy of the same files, between two S3 endpoints (two moto servers,
each in a process of its own, each with its own keys), and the peak memory of both.

    uv run python scripts/bench/bench_cache_copy.py                                 # 1 GiB in 32 files
    uv run python scripts/bench/bench_cache_copy.py --mib 256 --files 8 --rounds 3  # quicker

The two copies alternate, `--rounds` times each (each round into fresh keys); the figures are the
median round of each. Prints MiB/s of both, their ratio (target: >= 0.8), the CPU seconds each
spent in this process and in the two servers (steadier than wall time on a shared machine), and
each copy's peak traced Python memory (target for copy_output: flat in the output's size, bounded
by CopyConfig.memory, not by the output or a file).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: tests.emulators

from executor.core.locations import Storage  # noqa: E402
from executor.engine.prefix import location  # noqa: E402
from executor.engine.transfers.copy_output import PARALLEL_FILES, CopyConfig, copy_output  # noqa: E402
from tests.emulators import running_s3_server_process  # noqa: E402

MIB = 1 << 20


@dataclass
class Round:
    seconds: float
    own_cpu: float  # CPU seconds of this process (the copier's threads)
    servers_cpu: float  # CPU seconds of the two moto servers
    peak: int  # peak traced Python memory, bytes


def make_source(storage: Storage, root: str, mib: int, files: int) -> tuple[dict, ...]:
    """`files` files of mib/files MiB each (random bytes), and their manifest (sha256)."""
    fs, path = location.url_to_fs(root, storage)
    manifest = []
    size = mib * MIB // files
    for i in range(files):
        data = os.urandom(size)
        fs.pipe_file(f"{path}/part-{i:04d}.bin", data)
        manifest.append({"path": f"part-{i:04d}.bin", "size": size,
                         "checksum": {"algorithm": "sha256", "value": hashlib.sha256(data).hexdigest()}})
    return tuple(manifest)


def plain_copy(storage: Storage, source: str, destination: str, manifest: tuple[dict, ...]) -> None:
    """The reference: each file read whole and written whole, PARALLEL_FILES at once, no check."""
    src_fs, src = location.url_to_fs(source, storage)
    dst_fs, dst = location.url_to_fs(destination, storage)
    with ThreadPoolExecutor(PARALLEL_FILES) as pool:
        list(pool.map(lambda e: dst_fs.pipe_file(f"{dst}/{e['path']}", src_fs.cat_file(f"{src}/{e['path']}")),
                      manifest))


def checked_copy(storage: Storage, source: str, destination: str, manifest: tuple[dict, ...]) -> None:
    with location.using(storage):
        copied = copy_output(CopyConfig(source, destination, manifest))
    assert copied["bytes"] == sum(e["size"] for e in manifest)


def measure(copy: Callable[[], None]) -> Round:
    me = psutil.Process()

    def cpu() -> tuple[float, float]:
        own = me.cpu_times()
        servers = sum(sum(p.cpu_times()[:2]) for p in me.children(recursive=True))
        return own.user + own.system, servers

    (own0, servers0), started = cpu(), time.perf_counter()
    tracemalloc.start()
    copy()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    seconds = time.perf_counter() - started
    own1, servers1 = cpu()
    return Round(seconds, own1 - own0, servers1 - servers0, peak)


def summary(name: str, rounds: list[Round], mib: int) -> float:
    seconds = statistics.median(r.seconds for r in rounds)
    print(f"{name}: {seconds:5.1f} s, {mib / seconds:4.0f} MiB/s (rounds: "
          f"{', '.join(f'{r.seconds:.1f}' for r in rounds)} s); CPU s here "
          f"{statistics.median(r.own_cpu for r in rounds):.1f}, in the servers "
          f"{statistics.median(r.servers_cpu for r in rounds):.1f}; peak traced memory "
          f"{max(r.peak for r in rounds) / MIB:.0f} MiB")
    return seconds


def cpu_of(rounds: list[Round]) -> float:
    return statistics.median(r.own_cpu + r.servers_cpu for r in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="the output's size in MiB (default 1024)")
    parser.add_argument("--files", type=int, default=32, help="how many files it has (default 32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each copy, alternating (default 3)")
    args = parser.parse_args()
    with running_s3_server_process("source") as first, running_s3_server_process("dest") as second:
        storage = Storage({"s3://source": first.storage_options, "s3://dest": second.storage_options})
        manifest = make_source(storage, "s3://source/out", args.mib, args.files)
        plain: list[Round] = []
        checked: list[Round] = []
        for i in range(args.rounds):
            plain.append(measure(lambda: plain_copy(storage, "s3://source/out", f"s3://dest/plain-{i}", manifest)))
            checked.append(measure(lambda: checked_copy(storage, "s3://source/out", f"s3://dest/checked-{i}",
                                                        manifest)))
    print(f"{args.mib} MiB in {args.files} files, two moto S3 servers, {args.rounds} rounds each, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    plain_s = summary("plain fsspec copy (whole files, no check)", plain, args.mib)
    checked_s = summary("copy_output (every byte checked)        ", checked, args.mib)
    print(f"copy_output: {plain_s / checked_s:.2f}x the plain copy's throughput; "
          f"{cpu_of(plain) / cpu_of(checked):.2f}x by CPU seconds (here and in the servers: "
          f"the bound on a busy machine)")


if __name__ == "__main__":
    main()
