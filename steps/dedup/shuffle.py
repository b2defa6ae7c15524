"""Shuffles through storage: the stages of a dedup step exchange Parquet files, never driver memory.

A stage is `run_stage(work, name, fn, jobs)`: one `map_shards` task per job; each task writes its
files under `<work>/<name>/…` and then a marker `<work>/<name>/done/<key>.json` holding its small
result. A re-run (after a kill) returns committed results from their markers and redoes only the
rest; a task rewrites the same file names, so a half-written attempt is simply replaced.

`write_partitioned(dir, columns, partition, n, name)` splits a table of columns by a partition
array and writes `<dir>/<p:05d>/<name>.parquet` for each non-empty partition p;
`read_partition(dir, p)` concatenates what every writer wrote for p, in writer-name order.
Paths are local or URLs; everything is opened through executor.engine.location.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from executor.engine import location
from executor.engine.parallel import map_shards
from steps.documents import read_json, write_file_atomically, write_json_atomically


def write_table(path: str, table: pa.Table) -> int:
    """Write one Parquet file atomically; returns its size in bytes."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    data = buffer.getvalue()
    write_file_atomically(path, lambda f: f.write(data))
    return len(data)


def read_table(path: str) -> pa.Table:
    with location.open_file(path, "rb") as f:
        return pq.read_table(f)


def write_partitioned(directory: str, columns: dict[str, Any], partition: np.ndarray, num_partitions: int,
                      name: str) -> int:
    """Write rows to `<directory>/<p>/<name>.parquet` by their partition; returns bytes written."""
    table = pa.table(columns)
    if len(partition) == 0:
        return 0
    order = np.argsort(partition, kind="stable")
    sorted_parts = partition[order]
    bounds = np.searchsorted(sorted_parts, np.arange(num_partitions + 1))
    table = table.take(pa.array(order))
    written = 0
    for p in range(num_partitions):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        if hi > lo:
            written += write_table(f"{directory}/{p:05d}/{name}.parquet", table.slice(lo, hi - lo))
    return written


def read_partition(directory: str, p: int, schema: pa.Schema) -> pa.Table:
    """Every file written for partition p (in name order), as one table; empty when none."""
    fs, path = location.url_to_fs(f"{directory}/{p:05d}")
    try:
        names = sorted(n for n in fs.ls(path, detail=False) if n.endswith(".parquet"))
    except FileNotFoundError:
        names = []
    if not names:
        return schema.empty_table()
    tables = []
    for n in names:
        with fs.open(n, "rb") as f:
            tables.append(pq.read_table(f).select(schema.names).cast(schema))
    return pa.concat_tables(tables)


@dataclass
class _Resumable:
    """One stage task: the result from its marker when committed, else run it and commit."""

    fn: Callable[[Any], dict]
    job: Any
    marker: str

    def __repr__(self) -> str:
        return f"{getattr(self.fn, '__name__', 'task')}({self.job!r})"


def _run_resumable(task: _Resumable) -> dict:
    committed = read_json(task.marker)
    if committed is not None:
        return {**committed, "resumed": True}
    result = {"resumed": False, **task.fn(task.job)}
    write_json_atomically(task.marker, result)
    return result


def run_stage(work: str, name: str, fn: Callable[[Any], dict], jobs: Sequence[Any], keys: Sequence[str],
              desc: str, num_cpus: float = 1) -> list[dict]:
    """Run `fn(job)` for every job as a resumable task; results (small dicts) in job order."""
    tasks = [_Resumable(fn, job, f"{work}/{name}/done/{key}.json") for job, key in zip(jobs, keys)]
    return map_shards(_run_resumable, tasks, desc=desc, num_cpus=num_cpus)


def choose_partitions(work: str, shards: list, partition_bytes: int) -> int:
    """Chosen once from the input size and kept in `.work/plan.json`, so a resumed run agrees."""
    plan = read_json(f"{work}/plan.json")
    if plan is not None:
        return int(plan["num_partitions"])
    total = 0
    for path in sorted({s.path for s in shards}):
        fs, target = location.url_to_fs(path)
        total += fs.size(target)
    count = int(min(4096, max(1, -(-total // max(1, partition_bytes)))))
    write_json_atomically(f"{work}/plan.json", {"num_partitions": count})
    return count


def remove_tree(path: str) -> None:
    """Delete a work directory once the step no longer needs it."""
    fs, target = location.url_to_fs(path)
    if fs.exists(target):
        fs.rm(target, recursive=True)
