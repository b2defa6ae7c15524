"""Checkpoints of a state sharded over several host processes: every process writes its own shards.

    <checkpoint dir>/shards/process-00001.npz    this process's pieces of every leaf it holds
    <checkpoint dir>/shards/process-00001.json   {token, process, sha256, bytes, pieces: [{leaf, key, index}]}
    <checkpoint dir>/state.json                  {schema, step, layout: "sharded", leaves: [...]}   (process 0)
    <checkpoint dir>/COMMITTED                   {..., token, files: {name: {sha256, bytes}}}      (process 0, last)

A piece is one addressable shard with replica_id 0, so the pieces of all processes cover each
array exactly once and nothing is written twice. A process's manifest goes in after its arrays;
process 0 writes COMMITTED only once every process's manifest carries the token of this save
(the processes agree on it when training starts), so leftovers of an earlier attempt at the same
step are never mistaken for this one's. The barrier goes through storage, not a collective: the
save runs in a background thread while the devices keep training.

Restoring fills any sharding (another mesh, another number of processes) from the pieces: each
process reads only the files whose pieces overlap the shards it holds, and checks each file's
checksum on reading it.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np


LAYOUT = "sharded"
MANIFEST_SCHEMA = 1
POLL_S = 0.2


@dataclass(frozen=True)
class HostPieces:
    """This process's share of a state, copied to host memory (safe to write in a thread)."""

    process: int
    num_processes: int
    leaves: list[dict]                     # [{path, shape, dtype}] of every leaf, in flatten order
    pieces: list[tuple[int, list[list[int]], np.ndarray]]   # (leaf, [[start, stop], ...], values)


def _bounds(index: tuple, shape: tuple[int, ...]) -> list[list[int]]:
    return [[s.start or 0, shape[d] if s.stop is None else s.stop] for d, s in enumerate(index)]


def host_pieces(state: Any, leaf_path: Callable[[Any], str]) -> HostPieces:
    """The shards of `state` this process must write (replica 0 of each), copied off the devices."""
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(state)
    leaves, pieces = [], []
    for i, (path, leaf) in enumerate(leaves_with_paths):
        leaves.append({"path": leaf_path(path), "shape": list(leaf.shape), "dtype": str(np.dtype(leaf.dtype))})
        for shard in leaf.addressable_shards:
            if shard.replica_id == 0:
                pieces.append((i, _bounds(shard.index, leaf.shape), np.asarray(shard.data)))
    return HostPieces(jax.process_index(), jax.process_count(), leaves, pieces)


def _file_name(process: int) -> str:
    return f"process-{process:05d}"


def write(fs, directory: str, step: int, host: HostPieces, token: str, schema: int,
          wait_s: float = 600.0) -> None:
    """Write this process's pieces; process 0 then waits for every process's and commits."""
    name = _file_name(host.process)
    if host.process == 0 and fs.exists(f"{directory}/COMMITTED"):
        fs.rm(f"{directory}/COMMITTED")   # a leftover marker of an earlier attempt at this step
    fs.makedirs(f"{directory}/shards", exist_ok=True)
    arrays = {f"p{k:06d}": values for k, (_, _, values) in enumerate(host.pieces)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    payload = buffer.getvalue()
    fs.pipe_file(f"{directory}/shards/{name}.npz", payload)
    manifest = {"schema": MANIFEST_SCHEMA, "step": step, "token": token, "process": host.process,
                "num_processes": host.num_processes, "sha256": hashlib.sha256(payload).hexdigest(),
                "bytes": len(payload),
                "pieces": [{"leaf": leaf, "key": key, "index": index}
                           for key, (leaf, index, _) in zip(arrays, host.pieces)]}
    fs.pipe_file(f"{directory}/shards/{name}.json", json.dumps(manifest).encode())
    if host.process != 0:
        return
    fs.pipe_file(f"{directory}/state.json", json.dumps(
        {"schema": schema, "step": step, "layout": LAYOUT, "leaves": host.leaves}).encode())
    manifests = _await_manifests(fs, directory, host.num_processes, token, wait_s)
    files = {_file_name(m["process"]): {"sha256": m["sha256"], "bytes": m["bytes"]} for m in manifests}
    marker = {"schema": schema, "step": step, "layout": LAYOUT, "token": token, "files": files}
    fs.pipe_file(f"{directory}/COMMITTED", json.dumps(marker).encode())


def _await_manifests(fs, directory: str, num_processes: int, token: str, wait_s: float) -> list[dict]:
    deadline = time.monotonic() + wait_s
    found: dict[int, dict] = {}
    while True:
        for process in range(num_processes):
            if process in found:
                continue
            try:
                manifest = json.loads(fs.cat_file(f"{directory}/shards/{_file_name(process)}.json"))
            except (FileNotFoundError, ValueError):
                continue   # not written yet (or mid-write on a store without atomic puts)
            if manifest.get("token") == token:
                found[process] = manifest
        if len(found) == num_processes:
            return [found[p] for p in range(num_processes)]
        if time.monotonic() > deadline:
            missing = sorted(set(range(num_processes)) - set(found))
            raise TimeoutError(f"{directory}: processes {missing} did not write their shards within {wait_s:.0f}s; "
                               f"the checkpoint stays uncommitted (torn) and resume will skip it")
        fs.invalidate_cache(f"{directory}/shards")
        time.sleep(POLL_S)


def is_complete(fs, directory: str, marker: dict) -> tuple[bool, str]:
    """Every process file the marker lists is there with its recorded size (checksums: on read)."""
    if not marker.get("files"):
        return False, "COMMITTED lists no shard files"
    for name, expected in marker["files"].items():
        path = f"{directory}/shards/{name}.npz"
        try:
            size = fs.size(path)
        except FileNotFoundError:
            return False, f"shards/{name}.npz is missing"
        if size != expected["bytes"]:
            return False, f"shards/{name}.npz has {size} bytes, COMMITTED says {expected['bytes']}"
    return True, ""


class ShardReader:
    """Reads pieces of a sharded checkpoint, loading each process file at most once."""

    def __init__(self, fs, directory: str, marker: dict):
        self.fs, self.directory, self.marker = fs, directory, marker
        self._files: dict[str, Any] = {}
        self.pieces_of_leaf: dict[int, list[tuple[str, str, list[list[int]]]]] = {}
        for name in marker["files"]:
            manifest = json.loads(fs.cat_file(f"{directory}/shards/{name}.json"))
            for piece in manifest["pieces"]:
                self.pieces_of_leaf.setdefault(piece["leaf"], []).append((name, piece["key"], piece["index"]))

    def _npz(self, name: str):
        if name not in self._files:
            payload = self.fs.cat_file(f"{self.directory}/shards/{name}.npz")
            if hashlib.sha256(payload).hexdigest() != self.marker["files"][name]["sha256"]:
                raise ValueError(f"{self.directory}/shards/{name}.npz does not match the checksum in COMMITTED")
            self._files[name] = np.load(io.BytesIO(payload))
        return self._files[name]

    def read(self, leaf: int, shape: tuple[int, ...], dtype, index: tuple = ()) -> np.ndarray:
        """The values of `leaf` inside `index` (a tuple of slices; empty: the whole array)."""
        want = _bounds(index + (slice(None),) * (len(shape) - len(index)), shape)
        out = np.empty([hi - lo for lo, hi in want], dtype=dtype)
        covered = 0
        for name, key, have in self.pieces_of_leaf.get(leaf, []):
            overlap = [[max(a, c), min(b, d)] for (a, b), (c, d) in zip(want, have)]
            if any(lo >= hi for lo, hi in overlap):
                continue
            values = self._npz(name)[key]
            src = tuple(slice(lo - c, hi - c) for (lo, hi), (c, _) in zip(overlap, have))
            dst = tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(overlap, want))
            out[dst] = values[src]
            covered += int(np.prod([hi - lo for lo, hi in overlap]))
        if covered != out.size:
            raise ValueError(f"{self.directory}: the stored pieces of leaf {leaf} cover {covered} of the "
                             f"{out.size} values asked for; the checkpoint is incomplete")
        return out
