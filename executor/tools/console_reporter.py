"""The console renderer: what people see of plans and runs, drawn with rich (a plain line when piped).

`ConsoleReporter` styles each event the console view (console_view.py) hands it; the engine only
emits data (executor/engine/events.py), and every text from a step (its name, error, result, log)
is escaped here, so `[red]x[/red]` in a step name shows as written. The JSON plan is plan_json.py.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from executor.core.graph import StepNode
from executor.core.outcome import Ending, ending
from executor.core.plan import Action, Plan
from executor.core.record import Status
from executor.engine.runner.whole_lines import LockedFile, print_line

if TYPE_CHECKING:
    from rich.console import Console


def escape(text: str) -> str:
    """rich's markup escape, imported on first use: a no-op re-run or a JSON plan never needs rich."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


# Text that rich would print differently from print(): markup tags and :emoji: codes.
_RICH_SYNTAX = re.compile(r"[\[\]]|:\S*:")

ACTION_STYLE = {Action.RUN: "bold yellow", Action.SKIP: "green", Action.WAIT: "cyan",
                Action.BLOCKED: "red", Action.STOP: "bold red", Action.COPY: "bold blue"}


class Reporter(Protocol):
    """What the command line's console view (tools/console_view.py) calls: every method, no probing."""

    def info(self, message: str) -> None: ...
    def plain(self, text: str) -> None: ...
    def warning(self, message: str) -> None: ...
    def print_plan(self, plan: Plan, prefix: str, title: str | None = None) -> None: ...
    def print_run_end(self, plan: Plan, steps: Sequence[Any]) -> None: ...
    def close(self) -> None: ...
    def step_started(self, node: StepNode, attempt: int, takeover: bool, output_path: str) -> None: ...
    def step_succeeded(self, node: StepNode, seconds: float, result: Any) -> None: ...
    def step_failed(self, node: StepNode, error: str, traceback_tail: str | None) -> None: ...
    def step_retrying(self, node: StepNode, error: str) -> None: ...
    def step_blocked(self, node: StepNode, dependency: str) -> None: ...
    def step_waiting(self, node: StepNode, status: Status, silent_s: float, ttl_s: float) -> None: ...
    def step_still_waiting(self, node: StepNode, status: Status, silent_s: float, ttl_s: float) -> None: ...
    def step_done_elsewhere(self, node: StepNode, status: Status | None) -> None: ...
    def step_cut_off(self, node: StepNode, reason: str) -> None: ...
    def lease_lost(self, node: StepNode, reason: str) -> None: ...


def _short(value: object, limit: int = 80) -> str:
    """A result value as echoed on the console: whole in the record, shortened here."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"


class ConsoleReporter:
    """Readable lines on the terminal; rich degrades to plain text when not on a TTY."""

    def __init__(self, console: Console | None = None, verbose_wait_s: float = 10.0,
                 compact_above: int = 40, tally_every_s: float = 2.0, *, stderr: bool = False):
        self._console = console  # made on first use (importing rich costs a tenth of a second)
        self._stderr = stderr
        self.verbose_wait_s = verbose_wait_s
        self._last_wait_line: dict[str, float] = {}
        # Past `compact_above` steps to run, per-step start/finish lines give way to a tally line
        # every `tally_every_s` (failures are always shown): printing is not free, and 1,000 lines
        # nobody reads are noise.
        self.compact_above, self.tally_every_s = compact_above, tally_every_s
        self.compact = False
        self._tally = {"succeeded": 0, "running": 0}
        self._to_run = 0
        self._last_tally = 0.0
        self.outcomes: dict[str, dict[str, Any]] = {}  # digest -> seconds, result, error: for the end table

    def print_plan(self, plan: Plan, prefix: str, title: str | None = None, max_rows: int = 60) -> None:
        decisions = list(plan.decisions.values())
        self._to_run = sum(d.action in (Action.RUN, Action.WAIT) for d in decisions)
        self.compact = self._to_run > self.compact_above
        if len(decisions) > max_rows:  # the interesting rows first; everything is in --dry-run --json
            counts = {a.value: n for a in Action if (n := sum(d.action == a for d in decisions))}
            self.console.print(f"{len(decisions)} steps: " + ", ".join(f"{n} {a}" for a, n in counts.items()))
            decisions = sorted(decisions, key=lambda d: d.action == Action.SKIP)
        from rich.table import Table

        table = Table(title=title, show_lines=False, header_style="bold")
        for column in ("step", "id", "action", "reason"):
            table.add_column(column, overflow="fold")
        for d in decisions[:max_rows]:
            style = ACTION_STYLE[d.action]
            table.add_row(escape(d.node.name), escape(d.node.step_id.rsplit("-", 1)[-1]),
                          f"[{style}]{d.action.value}[/]", escape(d.reason))
        self.console.print(table)
        if len(decisions) > max_rows:
            self.console.print(f"… and {len(decisions) - max_rows} more (all of them: --dry-run --json)")
        self.console.print(f"outputs under {escape(prefix)}/<name>-<id>")

    def _tally_line(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_tally >= self.tally_every_s:
            self._last_tally = now
            t = self._tally
            self.console.print(f"[green]✔[/] {t['succeeded']}/{self._to_run} succeeded, {t['running']} running")

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            self._console = Console(file=LockedFile(stream), highlight=False, soft_wrap=True, emoji=False)
        return self._console

    def plain(self, text: str) -> None:
        """A line of plain text (a step's name, error or log, a path), shown exactly as written."""
        if self._console is None:
            print_line(text, sys.stderr if self._stderr else sys.stdout)
            return
        from rich.text import Text

        self.console.print(Text(text))

    def info(self, message: str) -> None:
        """A line of the renderer's own rich markup (every value in it escaped)."""
        if self._console is None and not _RICH_SYNTAX.search(message):  # what rich would print anyway
            print_line(message, sys.stderr if self._stderr else sys.stdout)
            return
        self.console.print(message)

    def step_started(self, node, attempt, takeover, output_path):
        self._tally["running"] += 1
        if self.compact and attempt == 1 and not takeover:
            return
        how = " (took over a stale lease)" if takeover else ""
        again = f" attempt {attempt}" if attempt > 1 else ""
        self.console.print(f"[yellow]▶[/] {escape(node.name)}{again}{how} → {escape(output_path)}")

    def step_succeeded(self, node, seconds, result):
        self.outcomes[node.digest] = {"seconds": seconds, "result": result}
        self._tally["running"] -= 1
        self._tally["succeeded"] += 1
        if self.compact:
            self._tally_line(force=self._tally["succeeded"] == self._to_run)
            return
        summary = ""
        if isinstance(result, dict) and result:
            items = [f"{str(k)[:40]}={_short(v)}" for k, v in list(result.items())[:6]
                     if isinstance(v, (int, float, str))]
            summary = "  " + ", ".join(items) if items else ""
        self.console.print(f"[green]✔[/] {escape(node.name)} ({seconds:.1f}s){escape(summary)}")

    def step_failed(self, node, error, traceback_tail):
        self.outcomes[node.digest] = {"error": error}
        self._tally["running"] = max(0, self._tally["running"] - 1)
        self.console.print(f"[bold red]✘ {escape(node.name)} failed:[/] {escape(error)}")
        if traceback_tail:
            self.console.print(escape(traceback_tail.rstrip()[-1500:]), style="dim")

    def step_retrying(self, node, error):
        self.console.print(f"[yellow]↻[/] {escape(node.name)} failed ({escape(error)}); retrying as the step allows")

    def step_blocked(self, node, dependency):
        self.console.print(f"[red]⊘[/] {escape(node.name)} blocked: dependency {escape(dependency)} failed")

    def step_waiting(self, node, status, silent_s, ttl_s):
        owner = status.owner
        who = f"{owner.host} pid {owner.pid}" if owner else "another runner"
        self.console.print(f"[cyan]…[/] {escape(node.name)}: running elsewhere ({escape(who)}); waiting "
                           f"(taken over if its lease shows no heartbeat for {ttl_s:.0f}s)")
        self._last_wait_line[node.digest] = time.monotonic()

    def step_still_waiting(self, node, status, silent_s, ttl_s):
        last = self._last_wait_line.get(node.digest, 0.0)
        if time.monotonic() - last >= self.verbose_wait_s:
            self._last_wait_line[node.digest] = time.monotonic()
            self.console.print(f"[cyan]…[/] {escape(node.name)}: no heartbeat for {silent_s:.0f}s "
                               f"of {ttl_s:.0f}s before takeover")

    def step_done_elsewhere(self, node, status):
        self.console.print(f"[green]✔[/] {escape(node.name)} (completed by another runner)")

    def step_cut_off(self, node, reason):
        self.console.print(f"[green]✂[/] {escape(node.name)} not run: {escape(reason)}")

    def lease_lost(self, node, reason):
        self.console.print(f"[bold red]![/] {escape(node.name)}: lease lost ({escape(reason)}); "
                           f"its task was cancelled and nothing was committed")

    def warning(self, message):
        self.console.print(f"[yellow]warning:[/] {escape(message)}")

    def close(self) -> None:
        """Nothing to stop here (the live view stops its panel)."""

    def print_run_end(self, plan: Plan, steps: Sequence[Any], max_rows: int = 60) -> None:
        """The per-step table a real run ends with (`steps`: the run's StepReports): how each step
        ended (core/outcome.py's Ending), how long it took, its result or error. Plain text when
        piped (rich drops styles outside a terminal), so CI logs keep the results. Past `max_rows`
        steps, the ones that ran or failed come first and the rest are counted."""
        from rich.table import Table  # imported lazily, like print_plan's (no-op runs skip rich)

        table = Table(title="this run", show_lines=False, header_style="bold")
        for column in ("step", "outcome", "took"):
            table.add_column(column, no_wrap=True)
        table.add_column("result", overflow="fold")
        actions = {d.node.step_id: d.action for d in (*plan.decisions.values(), *plan.standby.values())}
        ends = [(s, ending(s.status, actions[s.step_id], s.ran_here, bool(s.cut_off))) for s in steps]
        shown = sorted(ends, key=lambda se: se[1] in (Ending.SKIPPED, Ending.ELSEWHERE))
        for step, end in shown[:max_rows]:
            seen = self.outcomes.get(step.digest, {})
            if end == Ending.RAN:
                cells = "[green]ran[/]", f"{seen['seconds']:.1f}s" if "seconds" in seen else "-", \
                    result_text(seen.get("result"))
            elif end == Ending.SKIPPED:
                cells = end.value, "-", "succeeded earlier"
            elif end == Ending.ELSEWHERE:
                cells = end.value, "-", ""
            elif end == Ending.CUT_OFF:
                cells = f"[green]{end.value}[/]", "-", escape(step.cut_off or "")
            else:
                cells = f"[red]{end.value}[/]", "-", escape(step.error or "")
            table.add_row(escape(step.name), *cells)
        self.console.print(table)
        if len(shown) > max_rows:
            self.console.print(f"… and {len(shown) - max_rows} more skipped steps (all: stepgraph status --prefix P)")


def _attempt_of(log: str) -> int:
    return int(log.rsplit("-", 1)[-1].split(".")[0])


def result_text(result: Any, limit: int = 300) -> str:
    """A step's returned value as one plain line (the end table's `result` column)."""
    if result is None:
        return ""
    if isinstance(result, dict):
        text = ", ".join(f"{k}={v}" for k, v in result.items() if isinstance(v, (int, float, str, bool)))
    else:
        text = str(result)
    return escape(text[:limit] + ("…" if len(text) > limit else ""))


def echo_step_logs(reporter: Any, graph: Any, ran_here: list[str], fs: Any, prefix: str, lines: int = 40,
                   forwarded: Callable[[str, int], bool] = lambda step_id, attempt: False) -> None:
    """The tail of each target step's latest attempt log (Ray runs write one), when it ran here and
    `forwarded(step_id, attempt)` does not confirm Ray's forwarding printed all of it already: what a
    final summary step printed reaches a piped log even if Ray's forwarding lost it."""
    for digest in graph.targets:
        node = graph.nodes[digest]
        if node.step_id not in ran_here:
            continue
        logs = sorted(fs.glob(f"{prefix.rstrip('/')}/{node.output_rel}/.executor/logs/attempt-*.log"),
                      key=_attempt_of)
        if not logs or forwarded(node.step_id, _attempt_of(logs[-1])):
            continue  # inline steps (child processes) print straight to this console; Ray forwarded all of this one
        try:
            text = fs.cat_file(logs[-1]).decode(errors="replace").rstrip()
        except OSError:
            continue
        if text:
            reporter.info(f"output of {escape(node.name)} ({escape(logs[-1])}):")
            reporter.info(escape("\n".join(text.splitlines()[-lines:])))
