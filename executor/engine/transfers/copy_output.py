"""Copying one step's output from a cache-from prefix, checked byte by byte (runs on a worker).

`copy_output(CopyConfig)` is submitted to the runner like a step function, under the step's lease
(a Ray task, or the inline runner's child process). Each file of the source record's manifest is
copied, several at once. A file up to `whole_file_max` is read in one request, its size and
checksum (in the manifest's algorithm) checked, and only then written in one request: per file,
the fewest requests a store can serve, as a plain copy makes. A larger one is streamed `part` bytes
at a time (ranged reads, a multipart write), its size and checksum computed from the very bytes
written. The file bytes held at once by all parallel copies stay under `memory` (a copy waits
until its file, or its part, fits; the stores' clients may hold one more copy of what they send), so
memory is bounded whatever the output's or a file's size. A local file listed with its mtime
instead of a checksum (a mirror source, not read at planning) is hashed here, then stat'ed again to
see it unchanged. A file that is
missing, changed or unreadable rejects the whole source: what was written is removed and the call
fails with the reason, so the executor tries the next source or runs the step. Nothing is committed
here; the executor writes the record and the SUCCESS status only after this returns.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator

WHOLE_FILE_MAX = 64 << 20  # up to this, a file is one read and one write (after the check)
PART = 16 << 20  # a larger file is streamed in parts of this size (S3 needs 5 MiB or more)
MEMORY = 128 << 20  # file bytes held by all parallel copies at once
PARALLEL_FILES = 8


class SourceRejected(Exception):
    """The source does not hold what its manifest says: not used."""


@dataclass(frozen=True)
class CopyConfig:
    source: str  # the step's output under the cache-from prefix
    destination: str  # the step's output under this run's prefix
    files: tuple[dict[str, Any], ...]  # the source record's manifest: path, size, checksum
    parallel: int = PARALLEL_FILES
    whole_file_max: int = WHOLE_FILE_MAX
    part: int = PART
    memory: int = MEMORY


class _MemoryBudget:
    """Bytes held across the copy's threads: `hold(n)` waits until n more fit under the limit."""

    def __init__(self, limit: int):
        self.limit, self.held, self.changed = limit, 0, threading.Condition()

    @contextlib.contextmanager
    def hold(self, n: int) -> Iterator[None]:
        n = min(n, self.limit)  # a file or part larger than the whole budget is held alone
        with self.changed:
            self.changed.wait_for(lambda: self.held + n <= self.limit)
            self.held += n
        try:
            yield
        finally:
            with self.changed:
                self.held -= n
                self.changed.notify_all()


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


class _FileCopy:
    """One manifest entry from `src` to `dst`, checked against the entry."""

    def __init__(self, src_fs: Any, src: str, dst_fs: Any, dst: str, entry: dict[str, Any]):
        self.src_fs, self.src, self.dst_fs, self.dst, self.entry = src_fs, src, dst_fs, dst, entry
        self.size = int(entry.get("size") or 0)
        checksum = entry.get("checksum") or {}
        self.hasher, self.value_of = _hasher(str(checksum.get("algorithm")))

    def run(self, config: CopyConfig, budget: _MemoryBudget) -> dict[str, Any]:
        """The file copied and checked; its manifest entry as copied (the checksum of the bytes written)."""
        streamed = self.size > config.whole_file_max
        try:
            with budget.hold(config.part if streamed else self.size):
                size = self.streamed(config.part) if streamed else self.whole()
        except FileNotFoundError:
            raise SourceRejected(f"{self.entry['path']} is missing (the source is incomplete or was "
                                 f"deleted)") from None
        algorithm = (self.entry.get("checksum") or {}).get("algorithm")
        return {"path": self.entry["path"], "size": size,
                "checksum": {"algorithm": algorithm, "value": self.value_of(self.hasher)}}

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the source, in one request (a range past the end gives what is there)."""
        return self.src_fs.cat_file(self.src, start=start, end=end)

    def whole(self) -> int:
        """One read (a byte past the manifest's size, to see a longer file), checked, then one write."""
        data = self.read(0, self.size + 1) if self.size else self.empty()
        self.hasher.update(data)
        self.check(len(data))
        self.dst_fs.pipe_file(self.dst, data)
        return len(data)

    def empty(self) -> bytes:
        """An empty file: listed, not read (a range of an empty object is an error on S3, and a file
        that grew could be of any size)."""
        size = int(self.src_fs.info(self.src).get("size") or 0)
        if size:
            raise SourceRejected(f"{self.entry['path']}: {size} bytes, the manifest says 0")
        return b""

    def streamed(self, part: int) -> int:
        """Part by part, each hashed and written as read; the last read reaches past the manifest's
        size, so a longer file shows. Checked at the end (a failure removes the written file)."""
        written = 0
        with self.dst_fs.open(self.dst, "wb", block_size=part) as writer:
            while written < self.size:
                data = self.read(written, written + part if written + part < self.size else self.size + 1)
                if not data:
                    break
                self.hasher.update(data)
                writer.write(data)
                written += len(data)
        self.check(written)
        return written

    def check(self, size: int) -> None:
        """The bytes read against the manifest entry. An entry listed with an mtime and no checksum
        value (a local file, not read at planning) is checked by a stat after reading instead: the
        size and mtime it was listed with, else it changed meanwhile."""
        entry, checksum = self.entry, self.entry.get("checksum") or {}
        if size != self.size:
            raise SourceRejected(f"{entry['path']}: {size} bytes, the manifest says {entry.get('size')}")
        if "mtime" in entry and "value" not in checksum:
            now = self.src_fs.info(self.src)
            if (int(now.get("size") or 0), float(now.get("mtime") or 0)) != (size, float(entry["mtime"])):
                raise SourceRejected(f"{entry['path']}: changed since it was listed (size {now.get('size')}, "
                                     f"mtime {now.get('mtime')}; listed {entry['size']}, {entry['mtime']})")
        elif self.value_of(self.hasher) != checksum.get("value"):
            raise SourceRejected(f"{entry['path']}: {checksum.get('algorithm')} differs from the manifest "
                                 f"(the source file was changed)")


def _remove(fs: Any, paths: list[str]) -> None:
    for path in paths:
        try:
            fs.rm_file(path)
        except (FileNotFoundError, OSError):
            pass


def copy_output(config: CopyConfig) -> dict[str, Any]:
    """Copy and check every file; on any problem remove what was written and raise SourceRejected."""
    from executor.engine.prefix.location import url_to_fs

    started = time.monotonic()
    src_fs, src_root = url_to_fs(config.source)  # the run's storage options, keyed by location
    dst_fs, dst_root = url_to_fs(config.destination)
    copies = [_FileCopy(src_fs, f"{src_root}/{e['path']}", dst_fs, f"{dst_root}/{e['path']}", e)
              for e in config.files]
    for parent in sorted({c.dst.rsplit("/", 1)[0] for c in copies}):
        dst_fs.makedirs(parent, exist_ok=True)
    budget = _MemoryBudget(config.memory)
    ordered = sorted(copies, key=lambda c: -c.size)  # a long file started last would leave threads idle at the end
    pool = ThreadPoolExecutor(max(1, min(config.parallel, len(copies) or 1)))
    try:
        checked = list(pool.map(lambda c: c.run(config, budget), ordered))
    except Exception as e:
        pool.shutdown(cancel_futures=True)  # the files not started are not copied; the started ones end
        _remove(dst_fs, [c.dst for c in copies])
        if isinstance(e, SourceRejected):
            raise
        raise SourceRejected(f"reading it failed: {type(e).__name__}: {e}") from e
    finally:
        pool.shutdown()
    by_path = {e["path"]: e for e in checked}
    return {"files": len(copies), "bytes": sum(e["size"] for e in checked),
            "seconds": round(time.monotonic() - started, 3),
            "manifest": [by_path[e["path"]] for e in config.files]}  # in the manifest's order
