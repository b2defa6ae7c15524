"""Local-filesystem coordination store: compare-and-swap guarded by flock on a side lock file.

Correct across processes on one machine. Writers replace the object by rename under the lock, so
readers never need the lock and never see a torn object. A process forked while a lock is held
(a step's process, by the inline runner) closes the lock files it inherited at once: an flock
belongs to the open file, so a child keeping it would hold the key locked for as long as it
lives, and the parent's next write of that key (a lease's renewal) would wait that long.
Writes are not fsynced: they survive a crashed process (the page cache does), and after an OS
crash a status may be lost (the step simply re-runs) or empty (a clear corrupt-status error with a
repair command) — never wrong. The generation is a hash of the bytes; status objects carry a
sequence number, so every write changes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from executor.engine.store.base import StoreError, Versioned


_LOCK_SUFFIX = ".lock"  # side files: keys ending in .lock or holding .tmp- are reserved
_TMP_MARKER = ".tmp-"
# Status and lock files are created as open() creates any file: the umask decides their mode, as it
# does for every other file a run writes, so a group sharing a prefix (umask 002) can read, lock and
# replace what another member wrote
_FILE_MODE = 0o666
_READ_SIZE = 1 << 16
# read_many: from this many keys on, READ_THREADS threads read chunks of READ_CHUNK keys, READ_WAVE
# keys in flight at most (10,000 statuses, local ext4, loaded 2-core machine: 0.32 -> 0.16 s wall,
# the same CPU time; scripts/bench/bench_plan_marin.py)
READ_THREADS_FROM = 512
READ_THREADS = 8
READ_CHUNK = 128
READ_WAVE = 8192


# The lock files open in this process (process-wide, as file descriptors are), and a guard that
# makes opening one and noting it, or closing one and forgetting it, one step as far as a fork sees.
_LOCK_FDS: set[int] = set()
_LOCK_FDS_GUARD = threading.Lock()


def _close_lock_files_in_child() -> None:
    """In a just-forked child (which holds the guard, taken before the fork): drop the inherited locks."""
    for fd in _LOCK_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCK_FDS.clear()
    _LOCK_FDS_GUARD.release()


os.register_at_fork(before=_LOCK_FDS_GUARD.acquire, after_in_parent=_LOCK_FDS_GUARD.release,
                    after_in_child=_close_lock_files_in_child)


def _open_lock_file(path: Path) -> int:
    lock = str(path) + _LOCK_SUFFIX
    try:
        with _LOCK_FDS_GUARD:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, _FILE_MODE)  # RDWR: NFS locks need it
            except FileNotFoundError:  # the first write under this directory
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, _FILE_MODE)
            _LOCK_FDS.add(fd)
            return fd
    except OSError as e:
        raise StoreError(f"cannot lock {path}: {e.strerror}") from e


def _close_lock_file(fd: int) -> None:
    with _LOCK_FDS_GUARD:
        _LOCK_FDS.discard(fd)
        os.close(fd)  # closing releases the flock


def _generation(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


class LocalStore:
    def __init__(self, root: str):
        self.root = str(Path(root).absolute())

    def _path(self, key: str) -> Path:
        return Path(self.root) / key

    @contextmanager
    def _locked(self, key: str) -> Iterator[Path]:
        path = self._path(key)
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield path
        finally:
            _close_lock_file(fd)

    def read(self, key: str) -> Versioned | None:
        return self._read(key, None)

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        """read() of each key, in order, relative to the root opened once (planning reads one status
        per step: the kernel then resolves only the key's own path). Many keys are read by a few
        threads at once, a wave of READ_WAVE keys at a time (memory stays flat): the system calls
        release the GIL, so a 10,000-status plan waits for the disk's and the kernel's work
        overlapped rather than one open/read/close after another."""
        try:
            root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # nothing written under this prefix yet
            yield from (None for _ in keys)
            return
        except OSError as e:
            raise StoreError(f"cannot read {self.root}: {e.strerror}") from e
        keys = keys if isinstance(keys, (list, tuple)) else list(keys)
        try:
            if len(keys) < READ_THREADS_FROM:
                for key in keys:
                    yield self._read(key, root)
                return
            yield from self._read_in_waves(keys, root)
        finally:
            os.close(root)

    def _read_in_waves(self, keys: Sequence[str], root: int) -> Iterator[Versioned | None]:
        import concurrent.futures  # here: a small read never needs it

        def read_chunk(start: int) -> list[Versioned | None]:
            return [self._read(key, root) for key in keys[start:start + READ_CHUNK]]

        with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
            for wave in range(0, len(keys), READ_WAVE):
                for chunk in pool.map(read_chunk, range(wave, min(wave + READ_WAVE, len(keys)), READ_CHUNK)):
                    yield from chunk

    def _read(self, key: str, root: int | None) -> Versioned | None:
        # os.open/os.read, not pathlib or open(): planning reads thousands of these, and a file
        # object costs more than the read itself
        try:
            fd = os.open(key if root is not None else os.path.join(self.root, key), os.O_RDONLY, dir_fd=root)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read {os.path.join(self.root, key)}: {e.strerror}") from e
        try:
            data = os.read(fd, _READ_SIZE)
            if len(data) == _READ_SIZE:  # a read of a regular file stops short only at its end
                chunks = [data]
                while chunk := os.read(fd, _READ_SIZE):
                    chunks.append(chunk)
                data = b"".join(chunks)
        except OSError as e:
            raise StoreError(f"cannot read {os.path.join(self.root, key)}: {e.strerror}") from e
        finally:
            os.close(fd)
        return Versioned(data, _generation(data))

    def _write(self, path: Path, data: bytes) -> str:
        """The bytes go to a temporary file of this writer's own, renamed over the key."""
        tmp = f"{path}{_TMP_MARKER}{uuid.uuid4().hex}"
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)  # if the open made it
                raise
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror}") from e
        return _generation(data)

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        with self._locked(key) as path:
            if path.exists():
                return None
            return self._write(path, data)

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        with self._locked(key) as path:
            current = self.read(key)
            if current is None or current.generation != generation:
                return None
            return self._write(path, data)

    def delete(self, key: str) -> None:
        with self._locked(key) as path:
            path.unlink(missing_ok=True)

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        """Keys are matched as strings, like object stores: prefix "b-" finds "b-2/status.json".
        The matching objects are found by one walk, then read by read_many (on threads)."""
        start = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        keys = _walk_keys(str(self._path(start)), start + "/" if start else "", prefix, suffix)
        return {key: versioned.generation for key, versioned in zip(keys, self.read_many(keys))
                if versioned is not None}


def _walk_keys(top: str, base: str, prefix: str, suffix: str) -> list[str]:
    """The keys under `top` (whose key is `base`) that start with `prefix` and end with `suffix`,
    side files left out; in os.walk's order (top-down, as listed) and, as os.walk, not following
    links to directories and passing over directories it cannot list. os.scandir's entries, not
    os.walk: no os.path.join, relpath or lstat per directory (a prefix of 100,000 steps is
    200,000 directories), keys made by joining names."""
    keys: list[str] = []
    stack = [(top, base)]
    while stack:
        directory, base = stack.pop()
        subdirectories = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    key = base + entry.name
                    if entry.is_dir():
                        if not entry.is_symlink() and (not prefix or _may_hold(key, prefix)):
                            subdirectories.append((entry.path, key + "/"))
                    elif (key.startswith(prefix) and key.endswith(suffix)
                          and not key.endswith(_LOCK_SUFFIX) and _TMP_MARKER not in entry.name):
                        keys.append(key)
        except OSError:
            continue
        stack.extend(reversed(subdirectories))
    return keys


def _may_hold(directory_key: str, prefix: str) -> bool:
    """Whether keys starting with `prefix` can lie under this directory (so it is worth walking)."""
    directory_key += "/"
    return directory_key.startswith(prefix) or prefix.startswith(directory_key)
