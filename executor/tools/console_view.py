"""What the command line shows of a run: the subscriber `executor_main` gives `api.run_graph`.

It turns the run's events into console lines (a Reporter: engine/report.py), swaps in the live view
(engine/live.py) once steps are about to run, adds the drift warnings and the "what changed" notes
to the plan, and when the run ends prints its table, the targets' logs where a pipe may have lost
them, the run report's path (it writes the report: executor/tools/run_report.py) and a summary.
The library attaches none of this: a run called from Python prints nothing.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from executor.core.outcome import Outcome
from executor.core.plan import Action
from executor.engine.events import (Event, LeaseLost, LogLine, MirrorCopied, PlanMade, RunFinished, StepFinished,
                                    StepRetried, StepStarted, StepWaiting)
from executor.engine.report import Reporter

NOTES_UP_TO = 50  # new ids a real run explains itself; past that the search for earlier versions costs


class ConsoleView:
    """`live`: the reporter may become a live view (the command line made it, so it is the plain
    ConsoleReporter). `on_steps`: called once before any step runs (the command line resumes the
    garbage collector it paused for planning). `echo_logs`: print the targets' own logs at the end
    (stdout is not a terminal: Ray's forwarding of worker output can miss a pipe)."""

    def __init__(self, reporter: Reporter, *, main_file: str | None = None, live: bool = False,
                 still_running_every_s: float = 30.0, on_steps: Callable[[], None] = lambda: None,
                 echo_logs: bool | None = None):
        self.reporter, self.main_file, self.live = reporter, main_file, live
        self.still_running_every_s, self.on_steps = still_running_every_s, on_steps
        self.echo_logs = (not sys.stdout.isatty()) if echo_logs is None else echo_logs
        self.planned: PlanMade | None = None

    def __call__(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    # -- the plan ------------------------------------------------------------------------------
    def _plan_made(self, e: PlanMade) -> None:
        from executor.tools.drift import warn_drift  # issue 7: completed outputs whose step code changed

        self.planned = e
        warn_drift(e.plan, e.prefix, e.fs, self.reporter)
        self.reporter.info(f"prefix: {e.prefix}")
        if not e.plan.needs_runner:
            return  # the end says what there was to do
        self.on_steps()
        if self.live:  # a live view on a terminal; "still running" lines elsewhere
            from executor.engine.live import LiveReporter

            plain = self.reporter
            self.reporter = LiveReporter(console=plain.console, plan=e.plan,
                                         still_running_every_s=self.still_running_every_s,
                                         verbose_wait_s=plain.verbose_wait_s, compact_above=plain.compact_above,
                                         tally_every_s=plain.tally_every_s)
        self.reporter.print_plan(e.plan, e.prefix, title=e.description)
        self._what_changed(e)

    def _what_changed(self, e: PlanMade) -> None:
        """A real run says what changed since the nearest earlier version, as a dry run does (issue 19.8)."""
        from executor.tools.explain import print_dry_run_notes

        new = sum(d.action == Action.RUN and d.observed.status is None for d in e.plan.decisions.values())
        if new > NOTES_UP_TO:
            self.reporter.info(f"{new} new step ids; `stepgraph explain EXPERIMENT STEP` says why one changed")
        elif new:
            print_dry_run_notes(e.graph, e.plan, e.prefix, self.main_file, self.reporter, e.storage_options)

    # -- steps ---------------------------------------------------------------------------------
    def _step_started(self, e: StepStarted) -> None:
        self.reporter.step_started(e.node, e.attempt, e.takeover, e.output_path)

    def _step_finished(self, e: StepFinished) -> None:
        if e.outcome == Outcome.SUCCEEDED:
            if e.cut_off:
                self.reporter.step_cut_off(e.node, e.cut_off)
            elif e.elsewhere:
                self.reporter.step_done_elsewhere(e.node, None)
            else:
                self.reporter.step_succeeded(e.node, e.seconds or 0.0, e.result)
        elif e.outcome == Outcome.BLOCKED:
            self.reporter.step_blocked(e.node, e.dependency or "?")
        else:
            self.reporter.step_failed(e.node, e.error or "failed", e.traceback_tail)

    def _step_waiting(self, e: StepWaiting) -> None:
        if e.first:
            self.reporter.step_waiting(e.node, e.status, e.silent_s, e.ttl_s)
        else:
            self.reporter.step_still_waiting(e.node, e.status, e.silent_s, e.ttl_s)

    def _step_retried(self, e: StepRetried) -> None:
        self.reporter.step_retrying(e.node, e.error)

    def _lease_lost(self, e: LeaseLost) -> None:
        self.reporter.lease_lost(e.node, e.reason)

    def _mirror_copied(self, e: MirrorCopied) -> None:
        from executor.engine.report import escape

        if e.how == "failed":
            self.reporter.warning(escape(e.error or f"mirror {e.logical}: not copied"))
        elif e.how == "copied":
            from executor.engine.mirror import human_bytes

            self.reporter.info(escape(f"mirror {e.logical}: copied from {e.source} and checked "
                                      f"({human_bytes(e.bytes or 0)}, {e.files} files, in {e.seconds or 0:.1f}s)"))
        else:
            self.reporter.info(escape(f"mirror {e.logical}: {e.how} at {e.path}"))

    def _log_line(self, e: LogLine) -> None:
        (self.reporter.warning if e.level == "warning" else self.reporter.info)(e.text)

    # -- the end -------------------------------------------------------------------------------
    def _run_finished(self, e: RunFinished) -> None:
        self.reporter.close()
        result = e.result
        if result is None or self.planned is None or (result.run_file is None and result.interrupted):
            return  # the run raised (its error is the command's), or stopped before anything ran
        if result.run_file is None:
            self._nothing_ran(result, e.seconds)
            return
        self.reporter.print_run_end(self.planned.plan, result.steps)
        if self.echo_logs:
            from executor.engine.report import echo_step_logs
            from executor.engine.runner.log_forwarding import forwarded

            echo_step_logs(self.reporter, result.graph, [s.step_id for s in result.steps if s.ran_here],
                           self.planned.fs, result.prefix, forwarded=forwarded)
        self._summary(result, self._write_report(result))

    def _nothing_ran(self, result: Any, seconds: float) -> None:
        if result.failed:
            self.reporter.print_plan(self.planned.plan, self.planned.prefix, title=self.planned.description)
            self.reporter.info(f"[red]{len(result.failed)} step(s) failed or blocked[/]: "
                               + ", ".join(s.name for s in result.failed))
        else:
            self.reporter.info(f"all {len(result.steps)} step(s) already succeeded; nothing to do ({seconds:.2f}s)")

    def _write_report(self, result: Any) -> str | None:
        from executor.engine.prefixes import OpenedPrefix, open_prefix
        from executor.tools.run_report import write_report  # here: a plan or a no-op re-run writes no report

        try:
            planned = self.planned  # the run's prefix, already opened: the report re-opens nothing
            opened = (OpenedPrefix(planned.prefix, planned.storage_options, planned.store, planned.fs)
                      if planned.store is not None else open_prefix(planned.prefix, planned.storage_options))
            return write_report(opened, result.run_file)
        except Exception as e:  # noqa: BLE001 - the report is a convenience; the run file holds the facts
            self.reporter.warning(f"could not write the run report: {type(e).__name__}: {e}")
            return None

    def _summary(self, result: Any, report_path: str | None) -> None:
        succeeded = sum(s.status == Outcome.SUCCEEDED for s in result.steps)
        ran_here = sum(s.ran_here for s in result.steps)
        self.reporter.info(f"{succeeded}/{len(result.steps)} step(s) succeeded, {ran_here} ran here; "
                           f"run record: {result.run_file}" + (f"; report: {report_path}" if report_path else ""))
        failed = [s for s in result.steps if s.status.unsuccessful]
        if failed:
            self.reporter.info("[bold red]failed or blocked:[/] " + ", ".join(
                f"{s.step_id} ({s.error or ''})" for s in failed))


_HANDLERS: dict[type, Callable[[ConsoleView, Any], None]] = {
    PlanMade: ConsoleView._plan_made, StepStarted: ConsoleView._step_started,
    StepFinished: ConsoleView._step_finished, StepWaiting: ConsoleView._step_waiting,
    StepRetried: ConsoleView._step_retried, LeaseLost: ConsoleView._lease_lost, LogLine: ConsoleView._log_line,
    MirrorCopied: ConsoleView._mirror_copied,
    RunFinished: ConsoleView._run_finished}
