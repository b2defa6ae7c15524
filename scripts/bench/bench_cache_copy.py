"""Benchmark of a cache-from copy (issue 30): copy_output (streamed, every file checked against the
manifest) against a plain parallel fsspec copy of the same files, between two S3 endpoints (two moto
servers, each in a process of its own, each with its own keys), and the copier's peak memory.

    uv run python scripts/bench/bench_cache_copy.py                      # 1 GiB in 32 files
    uv run python scripts/bench/bench_cache_copy.py --mib 256 --files 16 # quicker

Prints MiB/s of both copies, their ratio (target: >= 0.8) and the copier's peak traced Python
memory (target: flat in the output's size: about CHUNK x parallel files, not the output).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: tests.emulators

from executor.core.locations import Storage  # noqa: E402
from executor.engine import location  # noqa: E402
from executor.engine.copy_output import PARALLEL_FILES, CopyConfig, copy_output  # noqa: E402
from tests.emulators import running_s3_server_process  # noqa: E402

MIB = 1 << 20


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--files", type=int, default=32)
    args = parser.parse_args()
    with running_s3_server_process("source") as first, running_s3_server_process("dest") as second:
        storage = Storage({"s3://source": first.storage_options, "s3://dest": second.storage_options})
        manifest = make_source(storage, "s3://source/out", args.mib, args.files)
        started = time.perf_counter()
        plain_copy(storage, "s3://source/out", "s3://dest/plain", manifest)
        plain_s = time.perf_counter() - started
        tracemalloc.start()
        started = time.perf_counter()
        with location.using(storage):
            copied = copy_output(CopyConfig("s3://source/out", "s3://dest/checked", manifest))
        checked_s = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert copied["bytes"] == args.mib * MIB // args.files * args.files
    print(f"{args.mib} MiB in {args.files} files, two moto S3 servers, {PARALLEL_FILES} files at once")
    print(f"plain fsspec copy (whole files, no check): {plain_s:.1f} s, {args.mib / plain_s:.0f} MiB/s")
    print(f"copy_output (streamed, sha256 checked):    {checked_s:.1f} s, {args.mib / checked_s:.0f} MiB/s "
          f"({plain_s / checked_s:.2f}x the plain copy's throughput)")
    print(f"copy_output peak traced Python memory: {peak / MIB:.0f} MiB")


if __name__ == "__main__":
    main()
