"""Checkpoints of the train state through fsspec: no pickle, committed last, torn ones skipped.

    <output>/checkpoints/step-000040/arrays.npz    every leaf of the state, in flatten order
    <output>/checkpoints/step-000040/state.json    {schema, step, leaves: [{path, shape, dtype}]}
    <output>/checkpoints/step-000040/COMMITTED     {schema, step, arrays_sha256}, written last

Files are written straight into the step directory (any leftover of an earlier attempt at that
step removed first) and the COMMITTED marker goes in last: no directory move, which object stores
cannot do atomically (S3 has no rename at all). The marker alone decides: the newest directory
whose marker exists and whose arrays match the marker's checksum is the one restored; anything
else is torn.
The pytree *structure* is not stored as code: a restore fills a template state built from the
same config and checks every leaf's path, shape and dtype against state.json.

A state sharded over several host processes (multi-host training) is saved in the "sharded"
layout instead (schema 2, see sharded_checkpoint.py): every process writes its own shards and
process 0 commits. `restore` reads both layouts, into host arrays or straight into any sharding.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import re
import sys
from typing import Any


from executor import url_to_fs
import jax
import numpy as np

from steps.train import sharded_checkpoint

WHOLE_SCHEMA = 1        # one arrays.npz written by one process
CHECKPOINT_SCHEMA = 2   # the newest this code reads: 2 adds the sharded layout
_STEP_DIR = re.compile(r"^step-(\d+)$")


class CheckpointMismatch(ValueError):
    """A checkpoint whose leaves do not fit the state this config builds."""


def leaf_path(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)


def _dir_name(step: int) -> str:
    return f"step-{step:06d}"


def _fs(output_path: str, subdir: str = "checkpoints"):
    fs, root = url_to_fs(output_path)
    return fs, root.rstrip("/") + "/" + subdir


def save(output_path: str, step: int, state: Any, subdir: str = "checkpoints") -> str:
    """Write `state` as the checkpoint of `step`; returns its directory."""
    fs, root = _fs(output_path, subdir)
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(state)
    arrays = {f"leaf_{i:05d}": np.asarray(leaf) for i, (_, leaf) in enumerate(leaves_with_paths)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    payload = buffer.getvalue()
    manifest = {"schema": WHOLE_SCHEMA, "step": step,
                "leaves": [{"path": leaf_path(p), "shape": list(np.shape(a)), "dtype": str(np.asarray(a).dtype)}
                           for (p, _), a in zip(leaves_with_paths, arrays.values())]}
    final = f"{root}/{_dir_name(step)}"
    if fs.exists(final):  # a torn leftover of an earlier attempt at this step
        fs.rm(final, recursive=True)
    fs.makedirs(final, exist_ok=True)
    fs.pipe_file(f"{final}/arrays.npz", payload)
    fs.pipe_file(f"{final}/state.json", json.dumps(manifest).encode())
    marker = {"schema": WHOLE_SCHEMA, "step": step, "arrays_sha256": hashlib.sha256(payload).hexdigest()}
    fs.pipe_file(f"{final}/COMMITTED", json.dumps(marker).encode())
    return final


def save_sharded(output_path: str, step: int, host: sharded_checkpoint.HostPieces, token: str,
                 subdir: str = "checkpoints") -> str:
    """Write this process's pieces of checkpoint `step` (every process calls it; process 0 commits
    once all have written theirs). `token` must be the same in every process of this run."""
    fs, root = _fs(output_path, subdir)
    final = f"{root}/{_dir_name(step)}"
    sharded_checkpoint.write(fs, final, step, host, token, CHECKPOINT_SCHEMA)
    return final


def _step_dirs(fs, root: str) -> list[tuple[int, str]]:
    if not fs.exists(root):
        return []
    found = []
    for entry in fs.ls(root, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        m = _STEP_DIR.match(name)
        if m:
            found.append((int(m.group(1)), f"{root}/{name}"))
    return sorted(found)


def _is_complete(fs, directory: str) -> tuple[bool, str]:
    try:
        marker = json.loads(fs.cat_file(f"{directory}/COMMITTED"))
    except FileNotFoundError:
        return False, "no COMMITTED marker"
    except (ValueError, OSError) as exc:
        return False, f"unreadable marker ({exc})"
    if marker.get("schema", 0) > CHECKPOINT_SCHEMA:
        return False, f"schema {marker.get('schema')} is newer than this code knows"
    if marker.get("layout") == sharded_checkpoint.LAYOUT:
        return sharded_checkpoint.is_complete(fs, directory, marker)
    try:
        payload = fs.cat_file(f"{directory}/arrays.npz")
    except FileNotFoundError:
        return False, "COMMITTED marker but arrays.npz missing"
    if hashlib.sha256(payload).hexdigest() != marker.get("arrays_sha256"):
        return False, "arrays.npz does not match the checksum in COMMITTED"
    return True, ""


def committed_steps(output_path: str, subdir: str = "checkpoints") -> list[int]:
    fs, root = _fs(output_path, subdir)
    return [step for step, d in _step_dirs(fs, root) if _is_complete(fs, d)[0]]


def latest_complete(output_path: str, log=None, subdir: str = "checkpoints") -> int | None:
    """Newest checkpoint step that is fully committed; torn ones are reported and skipped."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    fs, root = _fs(output_path, subdir)
    for step, directory in reversed(_step_dirs(fs, root)):
        ok, why = _is_complete(fs, directory)
        if ok:
            return step
        log(f"[checkpoint] skipping torn checkpoint {directory}: {why}")
    return None


def restore(output_path: str, step: int, template: Any, subdir: str = "checkpoints", shardings: Any = None) -> Any:
    """Load checkpoint `step` into the structure of `template` (same config => same leaves).

    The template's leaves only need `.shape` and `.dtype` (arrays or jax.ShapeDtypeStruct).
    Without `shardings` the leaves come back as host numpy arrays; with a matching pytree of
    shardings (any mesh, any number of processes) each process reads only what its devices hold."""
    fs, root = _fs(output_path, subdir)
    directory = f"{root}/{_dir_name(step)}"
    manifest = json.loads(fs.cat_file(f"{directory}/state.json"))
    if manifest.get("schema", 0) > CHECKPOINT_SCHEMA:
        raise CheckpointMismatch(f"{directory}: schema {manifest['schema']} is newer than this code knows")
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    if len(leaves_with_paths) != len(manifest["leaves"]):
        raise CheckpointMismatch(f"{directory}: {len(manifest['leaves'])} leaves stored, the config builds "
                                 f"{len(leaves_with_paths)}; was it written with another model/optimizer config?")
    for i, ((path, leaf), stored) in enumerate(zip(leaves_with_paths, manifest["leaves"])):
        expected = (leaf_path(path), list(np.shape(leaf)), str(np.dtype(leaf.dtype)))
        got = (stored["path"], list(stored["shape"]), stored["dtype"])
        if expected != got:
            raise CheckpointMismatch(f"{directory}: leaf {i} is {got}, the config expects {expected}")
    read = _piece_reader(fs, directory, manifest)
    shapes = [(tuple(np.shape(leaf)), np.dtype(leaf.dtype)) for _, leaf in leaves_with_paths]
    if shardings is None:
        leaves = [read(i, shape, dtype, ()) for i, (shape, dtype) in enumerate(shapes)]
    else:
        leaves = [jax.make_array_from_callback(shape, sharding,
                                               lambda index, i=i, shape=shape, dtype=dtype: read(i, shape, dtype, index))
                  for i, ((shape, dtype), sharding) in enumerate(zip(shapes, treedef.flatten_up_to(shardings)))]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _piece_reader(fs, directory: str, manifest: dict):
    """read(leaf, shape, dtype, index) -> the leaf's values inside index, for either layout."""
    if manifest.get("layout") == sharded_checkpoint.LAYOUT:
        return sharded_checkpoint.ShardReader(fs, directory, json.loads(fs.cat_file(f"{directory}/COMMITTED"))).read
    arrays = np.load(io.BytesIO(fs.cat_file(f"{directory}/arrays.npz")))
    member = functools.lru_cache(maxsize=1)(lambda leaf: arrays[f"leaf_{leaf:05d}"])  # once per leaf, not per device

    def read(leaf: int, shape, dtype, index: tuple) -> np.ndarray:
        value = member(leaf)
        if value.shape != shape or value.dtype != dtype:
            raise CheckpointMismatch(f"{directory}: leaf {leaf} holds {value.shape} {value.dtype}, "
                                     f"state.json says {shape} {dtype}")
        return value[index] if index else value
    return read


def prune(output_path: str, keep_last: int, permanent_every: int | None, up_to_step: int, subdir: str = "checkpoints") -> None:
    """Drop rolling checkpoints beyond the newest `keep_last`, and torn ones up to `up_to_step`;
    steps that are multiples of `permanent_every` stay forever."""
    fs, root = _fs(output_path, subdir)
    complete = [(s, d) for s, d in _step_dirs(fs, root) if _is_complete(fs, d)[0]]
    keep = {s for s, _ in complete[-keep_last:]}
    if permanent_every:
        keep |= {s for s, _ in complete if s % permanent_every == 0}
    complete_steps = {s for s, _ in complete}
    for step, directory in _step_dirs(fs, root):
        torn = step not in complete_steps
        if (torn and step <= up_to_step) or (not torn and step not in keep):
            fs.rm(directory, recursive=True)
    for entry in fs.ls(root, detail=False):
        if ".tmp-" in entry.rsplit("/", 1)[-1]:
            fs.rm(entry, recursive=True)
