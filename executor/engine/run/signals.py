"""How a run ends on a signal: SIGINT and SIGTERM stop it cleanly, and always promptly.

The first SIGINT or SIGTERM raises `Interrupted` (a KeyboardInterrupt) in the main thread, so the
run loop releases its leases as FAILED and cancels its tasks. A second signal, or interrupt
handling still going after `grace_s` (a Ray call that never returns, say), runs the registered
last-breath callbacks for a bounded time and exits the process at once with 128 + the first
signal's number (130 for SIGINT, 143 for SIGTERM). A watcher thread reads signals from a wakeup
fd, so this works even while the main thread is blocked inside C code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

from executor.core.exit_codes import for_signal

HANDLED = (signal.SIGINT, signal.SIGTERM)
REASONS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}


def reason_for(signum: int) -> str:
    return REASONS.get(signum, f"terminated (signal {signum})")


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by the first SIGINT or SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(reason_for(signum))
        self.signum = signum

    @property
    def reason(self) -> str:
        return reason_for(self.signum)


_received: int | None = None  # the first signal an active guard saw (Ray re-raises a bare KeyboardInterrupt)


def signum_of(error: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: ours carries it; one re-raised by Ray (its C++ wait
    turns any exception from a signal handler into a fresh KeyboardInterrupt) does not, so the
    active guard's record decides; a plain one is Ctrl-C."""
    return getattr(error, "signum", None) or _received or signal.SIGINT


LastBreath = Callable[[int], None]
_owns_process = False


def own_process() -> None:
    """This process is an experiment's command line (executor_main): runs may install signal
    handlers and end the process on a second signal. A program or notebook using the Python API
    keeps its own handlers (Ctrl-C is then a plain KeyboardInterrupt, still releasing leases)."""
    global _owns_process
    _owns_process = True


class SignalGuard:
    """Installs the handlers while active (main thread only; elsewhere it does nothing).

    `on_force(fn)` registers a callback run (with the first signal's number) just before a forced
    exit: release leases, record the exit code. They share one time budget and then the process
    exits whatever they are doing.
    """

    def __init__(self, grace_s: float = 10.0, force_budget_s: float = 1.5, watchdog_budget_s: float = 5.0):
        self.grace_s, self.force_budget_s, self.watchdog_budget_s = grace_s, force_budget_s, watchdog_budget_s
        self.first: int | None = None
        self._raised = False
        self._callbacks: list[LastBreath] = []
        self._previous: dict[int, object] = {}
        self._previous_wakeup: int | None = None
        self._sockets: tuple[Any, Any] | None = None  # socket.socket pair, made when first needed
        self._active = False
        self._done = threading.Event()
        self._forcing = threading.Lock()

    def on_force(self, fn: LastBreath) -> None:
        self._callbacks.append(fn)

    # -- installing ------------------------------------------------------------------------
    def __enter__(self) -> "SignalGuard":
        if not _owns_process or threading.current_thread() is not threading.main_thread():
            return self
        import socket  # here: only a run that executes steps guards them (socket is 10 ms to import)

        global _received
        self._active = True
        _received = None
        reader, writer = socket.socketpair()
        reader.setblocking(True)
        writer.setblocking(False)
        self._sockets = (reader, writer)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self.install()
        threading.Thread(target=self._watch, name="signal-watcher", daemon=True).start()
        return self

    def install(self) -> None:
        """(Re)install the handlers: call again after code that sets its own (ray.init does)."""
        if not self._active:
            return
        for signum in HANDLED:
            previous = signal.signal(signum, self._handle)
            if previous is not self._handle:
                self._previous.setdefault(signum, previous)

    def __exit__(self, *exc: object) -> None:
        if not self._active:
            return
        if self.first is None:  # after a signal the watchdog stays armed until the process exits
            self._done.set()
        for signum, previous in self._previous.items():
            with contextlib.suppress(Exception):
                signal.signal(signum, previous)  # type: ignore[arg-type]
        with contextlib.suppress(Exception):
            signal.set_wakeup_fd(self._previous_wakeup if self._previous_wakeup is not None else -1)
        if self._sockets and self._done.is_set():
            with contextlib.suppress(OSError):
                self._sockets[1].send(b"\0")  # wake the watcher so it sees _done
        self._active = False

    # -- reacting --------------------------------------------------------------------------
    def _handle(self, signum: int, frame: object) -> None:
        """Main thread: the first signal interrupts the run; later ones are the watcher's."""
        global _received
        if not self._raised:  # its own flag: the watcher thread may have seen this signal first
            self._raised = True
            if self.first is None:
                self.first = signum
            _received = _received or signum
            raise Interrupted(signum)

    def _watch(self) -> None:
        assert self._sockets is not None
        reader = self._sockets[0]
        seen = 0
        deadline: float | None = None
        while not self._done.is_set():
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            reader.settimeout(timeout)
            try:
                data = reader.recv(64)
            except TimeoutError:  # socket.timeout
                data = b""
            except OSError:
                return
            if self._done.is_set():
                return
            signals = [b for b in data if b in HANDLED]
            seen += len(signals)
            if signals and deadline is None:
                deadline = time.monotonic() + self.grace_s
                if self.first is None:
                    self.first = signals[0]
                global _received
                _received = _received or signals[0]
            if seen >= 2:
                self.force(self.force_budget_s, "second signal")
            elif deadline is not None and time.monotonic() >= deadline:
                self.force(self.watchdog_budget_s, f"interrupt handling still running after {self.grace_s:g}s")

    def force(self, budget_s: float, why: str) -> None:
        """Run the last-breath callbacks for at most `budget_s`, then exit the process now."""
        if not self._forcing.acquire(blocking=False):
            return
        signum = self.first or signal.SIGINT
        with contextlib.suppress(Exception):
            print(f"stepgraph: {why}; releasing leases and exiting now", file=sys.stderr, flush=True)

        def last_breath() -> None:
            for fn in self._callbacks:
                with contextlib.suppress(BaseException):
                    fn(signum)

        worker = threading.Thread(target=last_breath, name="last-breath", daemon=True)
        worker.start()
        worker.join(budget_s)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(for_signal(signum))
