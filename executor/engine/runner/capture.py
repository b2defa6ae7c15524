"""Per-attempt logs: a step's stdout/stderr copied to `<output>/.executor/logs/attempt-<n>.log`.

The copy is taken at the file-descriptor level (so output of C extensions, XLA, subprocesses
is kept too) and still goes to the original streams: Ray forwards them to the driver's
console with the task name (the step id) as prefix; an inline step's child shares the driver's.
Meant for processes that run one step at a time: Ray workers, and the inline runner's children
(steps on threads, for memory:// prefixes, keep no log).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import BinaryIO, Iterator

from executor.core import urls
from executor.core.locations import Storage

LOG_DIR = ".executor/logs"


def log_path(output_path: str, attempt: int) -> str:
    return f"{output_path.rstrip('/')}/{LOG_DIR}/attempt-{attempt}.log"


def _pump(read_fd: int, original_fd: int, sink, lock: threading.Lock) -> None:
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        with lock:
            try:
                sink.write(chunk)
            except (OSError, ValueError):
                pass
        try:
            os.write(original_fd, chunk)
        except OSError:
            pass


@contextlib.contextmanager
def captured_output(path: str | None, header: str = "", storage: Storage | None = None) -> Iterator[None]:
    """Tee fds 1 and 2 into `path` (appending) for the duration of the block.

    A local path is written as output arrives (it survives the process being killed); a URL
    (gs://, s3://) is written to a temporary file and uploaded, with the options `storage` has
    for it, when the block ends.
    """
    if not path:
        yield
        return
    remote = not urls.is_local(path)
    local = _local_file(path, remote)
    sink = open(local, "ab", buffering=0)
    if header:
        sink.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {header} ===\n".encode())
    _flush_std_streams()
    saved: dict[int, int] = {}
    threads: list[tuple[threading.Thread, int]] = []
    try:
        _tee(sink, saved, threads)
        yield
    finally:
        _flush_std_streams()
        _untee(saved, threads)
        sink.close()
        if remote:
            _upload(local, path, storage or Storage())


def _local_file(path: str, remote: bool) -> str:
    """Where the tee writes: the log itself, or a temporary file uploaded at the end."""
    if remote:
        with tempfile.NamedTemporaryFile(prefix="stepgraph-log-", suffix=".log", delete=False) as tmp:
            return tmp.name
    local = urls.canonical(path)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    return local


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _tee(sink: BinaryIO, saved: dict[int, int], threads: list[tuple[threading.Thread, int]]) -> None:
    """Point fds 1 and 2 at pipes whose pump threads write to `sink` and to the original fds
    (filling `saved` and `threads` as it goes, so the caller can undo a half-done tee)."""
    lock = threading.Lock()
    for fd in (1, 2):
        saved[fd] = os.dup(fd)
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        t = threading.Thread(target=_pump, args=(r, saved[fd], sink, lock), daemon=True, name=f"log-tee-{fd}")
        t.start()
        threads.append((t, r))


def _untee(saved: dict[int, int], threads: list[tuple[threading.Thread, int]]) -> None:
    for fd, original in saved.items():
        os.dup2(original, fd)  # closes the pipe's last write end: the pump sees EOF
    for t, r in threads:
        t.join(timeout=5)
        with contextlib.suppress(OSError):
            os.close(r)
    for original in saved.values():
        with contextlib.suppress(OSError):
            os.close(original)


def _upload(local: str, path: str, storage: Storage) -> None:
    try:
        from executor.engine.prefix import location

        with open(local, "rb") as src, location.open_file(path, "wb", storage=storage) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)  # a long log is streamed, never held whole
    except Exception as e:  # noqa: BLE001 - a lost log must not fail the step
        print(f"stepgraph: could not upload the step log to {path}: {e}", file=sys.stderr)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(local)
