"""Step output Ray forwards to the driver's console: plain when piped, complete before the step's ✔.

Ray prints each worker line behind an ANSI-coloured "(task pid=N)" prefix; when the driver's stdout
is not a terminal (and the user did not set RAY_COLOR_PREFIX), the printer installed here takes
the colour codes out of what Ray prints, as RAY_COLOR_PREFIX=0 would, without setting the variable
in the process's environment. Ray forwards asynchronously, so a
finished task's last lines could arrive after the driver printed its ✔ line: each attempt ends its
stdout and stderr with a marker line, the driver's log handler swallows markers and notes them, and
the Ray handle waits (bounded) for both before it reports the outcome.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any

from executor.engine.runner import whole_lines

MARKER = "::stepgraph-end-of-output::"
WAIT_S = 3.0  # a lost marker (a log monitor restart) delays one ✔ line by this much, never more

_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_seen: set[tuple[str, bool]] = set()
_changed = threading.Condition()


def _current_printer():
    # Ray has no public hook on the driver's printing of worker output (log_to_driver only turns it
    # on or off): the handler it registers on its stdstream dispatcher is replaced, and install()
    # falls back to Ray's own printer (noting it) when these private names move.
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return None
    handlers = dict(getattr(ray_worker.global_worker_stdstream_dispatcher, "handlers", []))
    return handlers.get("ray_print_logs")


def _installed() -> bool:
    return getattr(_current_printer(), "stepgraph", False)


def plain_when_piped() -> bool:
    """Whether forwarded lines are printed without colour codes: the driver's stdout is no terminal
    and RAY_COLOR_PREFIX (Ray's own setting) is not set."""
    return "RAY_COLOR_PREFIX" not in os.environ and not sys.stdout.isatty()


class _Plain:
    """A stream that writes what it is given without ANSI colour codes."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(_COLOUR.sub("", text))

    def flush(self) -> None:
        self.stream.flush()


def _print_plain(ray_worker: Any, data: dict, ignore_prefix: bool) -> None:
    """Ray's print_to_stdstream (its de-duplication, then its printer), into a stream without colour."""
    is_err = bool(data.get("is_err"))
    if not all(hasattr(ray_worker, n) for n in ("print_worker_logs", "stdout_deduplicator", "stderr_deduplicator")):
        ray_worker.print_to_stdstream(data, ignore_prefix=ignore_prefix)  # Ray's internals moved: its colours stay
        return
    deduplicator = ray_worker.stderr_deduplicator if is_err else ray_worker.stdout_deduplicator
    batches = [data] if data.get("pid") == "autoscaler" else deduplicator.deduplicate(data)
    for batch in batches:
        ray_worker.print_worker_logs(batch, _Plain(sys.stderr if is_err else sys.stdout), ignore_prefix)


def output_key(step_id: str, attempt: int) -> str:
    return f"{step_id}#{attempt}"


def print_end_markers(key: str) -> None:
    """In the worker, after the step's output (and outside its log capture)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            print(f"{MARKER}{key}", file=stream, flush=True)
        except (OSError, ValueError):
            pass


def install() -> None:
    """Wrap Ray's driver-side printer of worker output (after each ray.init that forwards logs)."""
    if _current_printer() is None or _installed():
        return
    from ray._private import worker as ray_worker

    dispatcher = ray_worker.global_worker_stdstream_dispatcher
    ignore_prefix = ray_worker._should_ignore_worker_log_prefix(ray_worker.global_worker)

    def print_without_markers(data: dict) -> None:
        lines = data.get("lines") or []
        keep = [line for line in lines if MARKER not in line]
        if keep:  # printed before the markers are noted: a batch's last lines come before its ✔
            with whole_lines.LOCK:  # Ray prints a line's text and newline in two writes
                if plain_when_piped():
                    _print_plain(ray_worker, {**data, "lines": keep}, ignore_prefix)
                else:
                    ray_worker.print_to_stdstream({**data, "lines": keep}, ignore_prefix=ignore_prefix)
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
        if len(keep) != len(lines):
            with _changed:
                for line in lines:
                    if MARKER in line:
                        _seen.add((line.split(MARKER, 1)[1].strip(), bool(data.get("is_err"))))
                _changed.notify_all()

    print_without_markers.stepgraph = True  # type: ignore[attr-defined]
    dispatcher.remove_handler("ray_print_logs")
    dispatcher.add_handler("ray_print_logs", print_without_markers)


def _both_seen(key: str) -> bool:
    return {(key, False), (key, True)} <= _seen  # callers hold _changed


def forwarded(step_id: str, attempt: int) -> bool:
    """Whether both markers of this attempt were printed through: all its output reached the console."""
    with _changed:
        return _both_seen(output_key(step_id, attempt))


def printed_directly(key: str) -> None:
    """An attempt whose output went straight to this console (an inline step's child shares its
    fds): all of it is there, as if both markers had been forwarded."""
    with _changed:
        _seen.update({(key, False), (key, True)})
        _changed.notify_all()


def forget(key: str) -> None:
    with _changed:
        _seen.discard((key, False))
        _seen.discard((key, True))


def wait_for_output(key: str, timeout_s: float = WAIT_S) -> bool:
    """Block until both markers of `key` were printed through (True), or the timeout (False)."""
    if not _installed():
        return False
    deadline = time.monotonic() + timeout_s
    with _changed:
        while not _both_seen(key):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _changed.wait(left)
        return True
