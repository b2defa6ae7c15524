"""Shuffles through storage: the stages of a dedup step exchange Arrow files, never driver memory.

A stage is `run_stage(work, name, fn, jobs)`: one `map_shards` task per job; each task writes its
files under `<work>/<name>/…` and then a marker `<work>/<name>/done/<key>.json` holding its small
result. A re-run (after a kill) returns committed results from their markers and redoes only the
rest; a task rewrites the same file names, so a half-written attempt is simply replaced.

Every result records the `node` that ran the task (see `nodes_per_stage`).

`write_partitioned(dir, columns, partition, n, name)` splits a table of columns by a partition
array and writes `<dir>/<p:05d>/<name>.arrow` for each non-empty partition p;
`read_partition(dir, p)` concatenates what every writer wrote for p, in writer-name order.
A file is Arrow's IPC file format with zstd-compressed buffers, written and read without
re-encoding the columns: Parquet's encoder cost ~2 ms a file, several times this, and a job
writes shards x partitions such files per stage.
Paths are local or URLs; everything is opened through `executor.url_to_fs` (the step's storage options).

Columns go between numpy/Python and Arrow through `arrow_column`, `numpy_column`, `string_column`
and `list_column`, built on Arrow buffers: pyarrow's own conversions (`pa.array`, `to_numpy`,
`to_pylist`, `pq.read_table`) import pandas when it is installed, and its takes and casts
pyarrow.compute: 0.3-0.7 s in every worker process, a third of a small step's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from fsspec.implementations.local import LocalFileSystem

from executor import current_node, map_shards, url_to_fs
from steps.documents import read_json, write_file_atomically, write_json_atomically


def arrow_column(values: np.ndarray | list) -> pa.Array:
    """An Arrow array from a numpy array (fixed-width dtype), a non-empty list of str or a non-empty
    list of 1-d numpy arrays (a list column)."""
    if isinstance(values, np.ndarray):
        values = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])
    if isinstance(values[0], np.ndarray):
        return pa.ListArray.from_arrays(arrow_column(_offsets([len(v) for v in values])),
                                        arrow_column(np.concatenate(values)))
    encoded = list(map(str.encode, values))  # UTF-8
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(_offsets(list(map(len, encoded)))),
                                       pa.py_buffer(b"".join(encoded)))


def _offsets(lengths: list[int] | np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError(f"{offsets[-1]} items or bytes in one column: more than an Arrow array holds (2**31); "
                         f"lower the step's shard_bytes or partition_bytes")
    return offsets.astype(np.int32)


def _array_to_numpy(array: pa.Array) -> np.ndarray:
    dtype = np.dtype(str(array.type))
    return np.frombuffer(array.buffers()[1], dtype, count=len(array), offset=array.offset * dtype.itemsize)


def numpy_column(table: pa.Table, name: str) -> np.ndarray:
    """A fixed-width column without nulls as one numpy array."""
    column = table.column(name)
    pieces = [_array_to_numpy(chunk) for chunk in column.chunks]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.dtype(str(column.type)))


def string_column(table: pa.Table, name: str) -> list[str]:
    """A string column without nulls as a list of str."""
    strings: list[str] = []
    for chunk in table.column(name).chunks:
        _, offsets_buffer, data_buffer = chunk.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32, count=len(chunk) + 1, offset=chunk.offset * 4).tolist()
        data = data_buffer.to_pybytes() if data_buffer is not None else b""
        strings.extend(data[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:]))
    return strings


def take_strings(values: pa.Array | pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """`values[rows]` of a string array without nulls, gathered with numpy: no str per row, and no
    `take`, which imports pyarrow.compute (0.1 s a worker process)."""
    chunks = [c for c in (values.chunks if isinstance(values, pa.ChunkedArray) else [values]) if len(c)]
    starts, ends, data, base = [], [], [], 0
    for chunk in chunks:  # an empty chunk may have no buffers
        _, offsets_buffer, data_buffer = chunk.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32, count=len(chunk) + 1, offset=chunk.offset * 4)
        starts.append(offsets[:-1].astype(np.int64) + base)
        ends.append(offsets[1:].astype(np.int64) + base)
        data.append(np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8))
        base += len(data[-1])
    rows = np.asarray(rows, np.int64)
    first = np.concatenate(starts)[rows] if starts else np.zeros(0, np.int64)
    lengths = (np.concatenate(ends)[rows] if ends else np.zeros(0, np.int64)) - first
    offsets = _offsets(lengths)
    gathered = np.concatenate(data)[np.repeat(first - offsets[:-1], lengths) + np.arange(int(offsets[-1]))] \
        if len(rows) else np.zeros(0, np.uint8)
    return pa.StringArray.from_buffers(len(rows), pa.py_buffer(offsets), pa.py_buffer(gathered))


def list_column(table: pa.Table, name: str) -> list[np.ndarray]:
    """A list column of fixed-width values (no nulls) as a list of numpy arrays."""
    arrays: list[np.ndarray] = []
    for chunk in table.column(name).chunks:
        offsets = _array_to_numpy(chunk.offsets).tolist()
        values = _array_to_numpy(chunk.values)
        arrays.extend(values[a:b] for a, b in zip(offsets[:-1], offsets[1:]))
    return arrays


def write_table(path: str, table: pa.Table, sha256: Any = None) -> int:
    """Write one Arrow IPC file (zstd-compressed buffers) atomically; returns its size in bytes.
    `sha256` (a `hashlib.sha256()`), when given, is updated with the file's bytes."""
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    data = sink.getvalue()
    if sha256 is not None:
        sha256.update(data)
    write_file_atomically(path, lambda f: f.write(data))
    return data.size


def write_partitioned(directory: str, columns: dict[str, Any], partition: np.ndarray, num_partitions: int,
                      name: str) -> int:
    """Write rows to `<directory>/<p>/<name>.parquet` by their partition; returns bytes written.
    A column is anything `arrow_column` takes, or an Arrow array."""
    if len(partition) == 0:
        return 0
    order = np.argsort(partition, kind="stable")
    bounds = np.searchsorted(partition[order], np.arange(num_partitions + 1))
    table = pa.Table.from_arrays([_permuted(values, order) for values in columns.values()], names=list(columns))
    written = 0
    for p in range(num_partitions):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        if hi > lo:
            written += write_table(f"{directory}/{p:05d}/{name}.arrow", table.slice(lo, hi - lo))
    return written


def read_table(path: str) -> pa.Table:
    """One Arrow IPC file written by `write_table`, read whole (one request on an object store)."""
    fs, target = url_to_fs(path)
    with fs.open(target, "rb") as f:
        data = f.read()
    return ipc.open_file(pa.py_buffer(data)).read_all()


def read_partition(directory: str, p: int, schema: pa.Schema) -> pa.Table:
    """Every file written for partition p (in name order), as one table; empty when none."""
    fs, path = url_to_fs(f"{directory}/{p:05d}")
    try:
        names = sorted(n for n in fs.ls(path, detail=False) if n.endswith(".arrow"))
    except FileNotFoundError:
        names = []
    if not names:
        return pa.Table.from_batches([], schema=schema)
    tables = []
    for n in names:
        with fs.open(n, "rb") as f:  # the whole file in one read (one request on an object store)
            data = f.read()
        table = ipc.open_file(pa.py_buffer(data)).read_all().select(schema.names)
        tables.append(table if table.schema == schema else table.cast(schema))
    return pa.concat_tables(tables)


def _permuted(values: np.ndarray | list | pa.Array | pa.ChunkedArray, order: np.ndarray) -> pa.Array:
    if isinstance(values, np.ndarray):
        return arrow_column(values[order])
    if isinstance(values, (pa.Array, pa.ChunkedArray)):  # Arrow strings stay Arrow: no str per row
        return take_strings(values, order)
    return arrow_column([values[i] for i in order.tolist()])


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
    result = {"resumed": False, **task.fn(task.job), "node": current_node()}
    write_json_atomically(task.marker, result)
    return result


def nodes_per_stage(stages: dict[str, list[dict]]) -> dict[str, int]:
    """How many nodes ran tasks of each stage (from the `node` of each task's result)."""
    return {name: len({r.get("node") for r in results}) for name, results in stages.items()}


def run_stage(work: str, name: str, fn: Callable[[Any], dict], jobs: Sequence[Any], keys: Sequence[str],
              desc: str, num_cpus: float = 1) -> list[dict]:
    """Run `fn(job)` for every job as a resumable task; results (small dicts) in job order."""
    tasks = [_Resumable(fn, job, f"{work}/{name}/done/{key}.json") for job, key in zip(jobs, keys)]
    return map_shards(_run_resumable, tasks, desc=desc, num_cpus=num_cpus)


def choose_partitions(work: str, shards: list, partition_bytes: int) -> int:
    """Chosen once from the input size and kept in `.work/plan.json`, so a resumed run agrees.
    Compressed inputs count 4x their size (about what zstd and gzip save on text)."""
    plan = read_json(f"{work}/plan.json")
    if plan is not None:
        return int(plan["num_partitions"])
    total = 0
    for path in sorted({s.path for s in shards}):
        fs, target = url_to_fs(path)
        total += fs.size(target) * (4 if path.endswith((".gz", ".zst")) else 1)
    count = int(min(4096, max(1, -(-total // max(1, partition_bytes)))))
    write_json_atomically(f"{work}/plan.json", {"num_partitions": count})
    return count


def remove_tree(path: str) -> None:
    """Delete a work directory once the step no longer needs it.

    On an object store it goes one directory at a time: the tree holds (shards x partitions) files,
    and listing it whole (as a recursive `rm` does) would hold them all in the driver's memory
    (+27 MiB for 20k files, growing with the corpus). A directory holds at most one file per shard
    or per partition."""
    fs, target = url_to_fs(path)
    if isinstance(fs, LocalFileSystem):
        if fs.exists(target):
            fs.rm(target, recursive=True)
        return
    _remove_directory(fs, target)


def _remove_directory(fs: Any, directory: str) -> None:
    try:
        entries = fs.ls(directory, detail=True)
    except FileNotFoundError:
        return
    for entry in entries:
        if entry["type"] == "directory":
            _remove_directory(fs, entry["name"])
    files = [entry["name"] for entry in entries if entry["type"] != "directory"]
    if files:
        fs.rm(files)
