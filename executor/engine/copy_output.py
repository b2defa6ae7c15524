"""Copying one step's output from a cache-from prefix, checked byte by byte (runs on a worker).

`copy_output(CopyConfig)` is submitted to the runner like a step function, under the step's lease
(a Ray task, or the in-process runner's child). Each file of the source record's manifest is
copied (several at once): a file up to CHUNK is read whole, checked, then written in one request; a
larger one is streamed CHUNK by CHUNK (bounded memory whatever the output's size), its size and
checksum computed from the very bytes written, in the manifest's algorithm, and compared with the
manifest (a local file listed with its mtime instead of a checksum: hashed here, then stat'ed again
to see it unchanged). A file that is
missing, changed or unreadable rejects the whole source: what was written is removed and the call
fails with the reason, so the executor tries the next source or runs the step. Nothing is committed
here; the executor writes the record and the SUCCESS status only after this returns.
"""

from __future__ import annotations

import base64
import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

CHUNK = 8 << 20  # bytes per read: memory is at most CHUNK x parallel files, whatever the output's size
PARALLEL_FILES = 8


class SourceRejected(Exception):
    """The source does not hold what its manifest says: not used."""


@dataclass(frozen=True)
class CopyConfig:
    source: str  # the step's output under the cache-from prefix
    destination: str  # the step's output under this run's prefix
    files: tuple[dict[str, Any], ...]  # the source record's manifest: path, size, checksum
    parallel: int = PARALLEL_FILES


def _hasher(algorithm: str) -> tuple[Any, Callable[[Any], str]]:
    """A streaming hash for a manifest algorithm, and how its value is written there."""
    if algorithm == "sha256":
        return hashlib.sha256(), lambda h: h.hexdigest()
    if algorithm == "s3-etag-md5":
        return hashlib.md5(), lambda h: h.hexdigest()
    if algorithm == "md5-base64":
        return hashlib.md5(), lambda h: base64.b64encode(h.digest()).decode()
    if algorithm == "crc32c":
        import google_crc32c

        return google_crc32c.Checksum(), lambda h: base64.b64encode(h.digest()).decode()
    raise SourceRejected(f"its manifest uses a checksum algorithm this executor cannot check: {algorithm!r}")


def _copy_file(src_fs: Any, src: str, dst_fs: Any, dst: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Copy one file, checked; its manifest entry with the checksum of the bytes written."""
    checksum = entry.get("checksum") or {}
    hasher, value_of = _hasher(str(checksum.get("algorithm")))
    try:
        if int(entry.get("size") or 0) <= CHUNK:  # one read, checked, then one write (a single PUT)
            data = src_fs.cat_file(src)
            hasher.update(data)
            checked = _check(src_fs, src, entry, len(data), value_of(hasher))
            dst_fs.pipe_file(dst, data)
            return checked
        size = 0
        with src_fs.open(src, "rb", block_size=CHUNK, cache_type="none") as reader, \
                dst_fs.open(dst, "wb", block_size=CHUNK) as writer:
            for chunk in iter(lambda: reader.read(CHUNK), b""):
                hasher.update(chunk)
                writer.write(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise SourceRejected(f"{entry['path']} is missing (the source is incomplete or was deleted)") from None
    return _check(src_fs, src, entry, size, value_of(hasher))


def _check(src_fs: Any, src: str, entry: dict[str, Any], size: int, value: str) -> dict[str, Any]:
    """The bytes read against the manifest entry; the entry as copied (its checksum's value that of the bytes).
    An entry listed with an mtime and no checksum value (a local file, not read at planning) is checked by
    a stat after reading instead: the size and mtime it was listed with, else it changed meanwhile."""
    checksum = entry.get("checksum") or {}
    if size != int(entry.get("size") or 0):
        raise SourceRejected(f"{entry['path']}: {size} bytes, the manifest says {entry.get('size')}")
    if "mtime" in entry and "value" not in checksum:
        now = src_fs.info(src)
        if (int(now.get("size") or 0), float(now.get("mtime") or 0)) != (size, float(entry["mtime"])):
            raise SourceRejected(f"{entry['path']}: changed since it was listed (size {now.get('size')}, mtime "
                                 f"{now.get('mtime')}; listed {entry['size']}, {entry['mtime']})")
    elif value != checksum.get("value"):
        raise SourceRejected(f"{entry['path']}: {checksum.get('algorithm')} differs from the manifest "
                             f"(the source file was changed)")
    return {"path": entry["path"], "size": size, "checksum": {"algorithm": checksum.get("algorithm"), "value": value}}


def _remove(fs: Any, paths: list[str]) -> None:
    for path in paths:
        try:
            fs.rm_file(path)
        except (FileNotFoundError, OSError):
            pass


def copy_output(config: CopyConfig) -> dict[str, Any]:
    """Copy and check every file; on any problem remove what was written and raise SourceRejected."""
    from executor.engine.location import url_to_fs

    started = time.monotonic()
    src_fs, src_root = url_to_fs(config.source)  # the run's storage options, keyed by location
    dst_fs, dst_root = url_to_fs(config.destination)
    jobs = [(f"{src_root}/{e['path']}", f"{dst_root}/{e['path']}", e) for e in config.files]
    for parent in sorted({dst.rsplit("/", 1)[0] for _, dst, _ in jobs}):
        dst_fs.makedirs(parent, exist_ok=True)
    try:
        with ThreadPoolExecutor(max(1, min(config.parallel, len(jobs) or 1))) as pool:
            checked = list(pool.map(lambda job: _copy_file(src_fs, job[0], dst_fs, job[1], job[2]), jobs))
    except Exception as e:
        _remove(dst_fs, [dst for _, dst, _ in jobs])
        if isinstance(e, SourceRejected):
            raise
        raise SourceRejected(f"reading it failed: {type(e).__name__}: {e}") from e
    return {"files": len(jobs), "bytes": sum(e["size"] for e in checked),
            "seconds": round(time.monotonic() - started, 3), "manifest": checked}
