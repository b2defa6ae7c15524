"""The live view of a run, a console renderer beside console_view.py: steps done / running / waiting,
and how long each running step has taken.

On a terminal a rich `Live` panel sits under the usual event lines; elsewhere (pipes, CI logs)
the reporter degrades to the plain lines of `ConsoleReporter` plus a one-line tally after each
step ends, and every `still_running_every_s` (default 30 s) a "still running X (30s)" line, so a
long step is never silent in a log.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from executor.core.outcome import Outcome, outcome_of_action
from executor.core.plan import Plan
from executor.tools.console_reporter import ConsoleReporter


_TALLY_WORDS = {Outcome.SUCCEEDED: "done", Outcome.RUNNING: "running", Outcome.PENDING: "waiting",
                Outcome.WATCHING: "waiting", Outcome.FAILED: "failed", Outcome.BLOCKED: "blocked"}


class LiveReporter(ConsoleReporter):
    """ConsoleReporter plus a live panel (terminal) or tally lines (anything else)."""

    def __init__(self, console: Console | None = None, plan: Plan | None = None, *,
                 clock=time.monotonic, max_rows: int = 12, still_running_every_s: float = 30.0, **kwargs: Any):
        super().__init__(console, **kwargs)
        self.still_running_every_s = still_running_every_s
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self.clock, self.max_rows = clock, max_rows
        self.started = clock()
        self.state: dict[str, Outcome] = {}  # by digest
        self.names: dict[str, str] = {}
        self.running_since: dict[str, float] = {}
        self.attempt: dict[str, int] = {}
        if plan is not None:
            for digest, d in plan.decisions.items():
                self.state[digest] = outcome_of_action(d.action)
                self.names[digest] = d.node.name
        self._live: Live | None = None
        self._closed = False
        self._last_counts: dict[str, int] | None = None  # of the last piped progress line

    # -- the panel -------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Steps per word of the tally: done, running, waiting (for dependencies or a lease), failed, blocked."""
        out = {k: 0 for k in _TALLY_WORDS.values()}
        for s in self.state.values():
            out[_TALLY_WORDS[s]] += 1
        return out

    def tally(self) -> str:
        c = self.counts()
        extra = "".join(f", {c[k]} {k}" for k in ("failed", "blocked") if c[k])
        return (f"{c['done']}/{len(self.state)} done, {c['running']} running, {c['waiting']} waiting{extra} "
                f"({self.clock() - self.started:.0f}s)")

    def __rich__(self) -> Group:
        now = self.clock()
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("running step")
        table.add_column("elapsed", justify="right")
        running = sorted(self.running_since.items(), key=lambda kv: kv[1])
        for digest, since in running[: self.max_rows]:
            again = f" (attempt {self.attempt[digest]})" if self.attempt.get(digest, 1) > 1 else ""
            table.add_row(escape(self.names.get(digest, digest[:12])) + again, f"{now - since:.0f}s")
        if len(running) > self.max_rows:
            table.add_row(f"… and {len(running) - self.max_rows} more", "")
        return Group(Text(self.tally(), style="bold"), table)

    def _ensure_live(self) -> None:
        if self._live is None and not self._closed and self.console.is_terminal:
            self._live = Live(self, console=self.console, refresh_per_second=2, transient=True,
                              redirect_stdout=True, redirect_stderr=True)
            self._live.start()
        elif (self._ticker is None and not self._closed and not self.console.is_terminal
              and self.still_running_every_s > 0):
            self._ticker = threading.Thread(target=self._still_running_lines, name="still-running", daemon=True)
            self._ticker.start()

    def still_running_line(self) -> str | None:
        now = self.clock()
        running = sorted(list(self.running_since.items()), key=lambda kv: kv[1])
        if not running:
            return None
        shown = ", ".join(f"{self.names.get(d, d[:12])} ({now - since:.0f}s)" for d, since in running[:8])
        more = f" and {len(running) - 8} more" if len(running) > 8 else ""
        return f"  still running {shown}{more}; {self.tally()}"

    def _still_running_lines(self) -> None:
        while not self._stop.wait(self.still_running_every_s):
            line = self.still_running_line()
            if line:
                self.console.print(escape(line))

    def _ended(self, node: Any, state: Outcome) -> None:
        self.names.setdefault(node.digest, node.name)
        self.state[node.digest] = state
        self.running_since.pop(node.digest, None)
        if self._live is not None:
            self._live.refresh()
        elif not self.console.is_terminal and not self.compact:  # compact runs get ConsoleReporter's tally
            self._last_counts = self.counts()
            self.console.print(f"  [dim]progress: {self.tally()}[/]")

    def close(self) -> None:
        """Stop the live panel (the final tally is printed once, as a plain line)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self._live is not None:
            self._live.stop()
            self._live = None
        if not self._closed and self.state and self.counts() != self._last_counts:
            self.console.print(f"progress: {self.tally()}")  # unless the last step's line just said it
        self._closed = True

    # -- events ----------------------------------------------------------------------------
    def step_started(self, node, attempt, takeover, output_path):
        super().step_started(node, attempt, takeover, output_path)
        self.names.setdefault(node.digest, node.name)
        self.state[node.digest] = Outcome.RUNNING
        self.running_since[node.digest] = self.clock()
        self.attempt[node.digest] = attempt
        self._ensure_live()

    def step_succeeded(self, node, seconds, result):
        super().step_succeeded(node, seconds, result)
        self._ended(node, Outcome.SUCCEEDED)

    def step_failed(self, node, error, traceback_tail):
        super().step_failed(node, error, traceback_tail)
        self._ended(node, Outcome.FAILED)

    def step_blocked(self, node, dependency):
        super().step_blocked(node, dependency)
        self._ended(node, Outcome.BLOCKED)

    def step_done_elsewhere(self, node, status):
        super().step_done_elsewhere(node, status)
        self._ended(node, Outcome.SUCCEEDED)

    def step_cut_off(self, node, reason):
        super().step_cut_off(node, reason)
        self._ended(node, Outcome.SUCCEEDED)

    def lease_lost(self, node, reason):
        super().lease_lost(node, reason)
        self.state[node.digest] = Outcome.PENDING
        self.running_since.pop(node.digest, None)
