"""What the command line shows of a run, a dry run, `--check`, `--explain`, `stepgraph check`: its subscriber.

It turns events (executor/engine/events.py: data, never markup) into console lines drawn by a
Reporter (console_reporter.py, which styles them and escapes every text from a step), swaps in the
live view (console_live.py) once steps are about to run, adds the drift warnings and the "what changed"
notes to a run's plan (emitted here, by drift.py and explain.py, to this view), and when the run
ends prints its table, the targets' logs where a pipe may have lost them, the run report's path
(it writes the report: executor/tools/run_report.py) and a summary. The library attaches none of
this: a call from Python prints nothing.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from executor.core.outcome import Outcome
from executor.core.plan import Action
from executor.engine.events import (ChangeNoted, CrossRegionNoted, DriftFound, Event, Events, ExperimentChecked,
                                    ExperimentsChecked, IdsChecked, IdsWritten,
                                    LeaseLost, LogLine, MirrorCopied, MirrorPlanned, PlanMade, RunFinished,
                                    ShardsForecast, StandbyNoted, StepExplained, StepFinished, StepRetried, StepStarted, StepWaiting,
                                    TransferRefusal)
from executor.tools.console_reporter import Reporter, escape

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
        self._changes_shown = False  # the "what changed" heading, once

    def __call__(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    # -- the plan ------------------------------------------------------------------------------
    def _plan_made(self, e: PlanMade) -> None:
        self.planned = e
        if e.dry_run:  # its drift warnings came before it; its notes come after it (tools/dry_run.py)
            self.reporter.plain(f"prefix: {e.prefix}")
            self.reporter.print_plan(e.plan, e.prefix, title=e.description)
            return
        from executor.tools.drift import warn_drift  # issue 7: completed outputs whose step code changed

        warn_drift(e.plan, e.prefix, e.fs, Events([self]))
        self.reporter.plain(f"prefix: {e.prefix}")
        if not e.plan.needs_runner:
            return  # the end says what there was to do
        self.on_steps()
        if self.live:  # a live view on a terminal; "still running" lines elsewhere
            from executor.tools.console_live import LiveReporter

            plain = self.reporter
            self.reporter = LiveReporter(console=plain.console, plan=e.plan,
                                         still_running_every_s=self.still_running_every_s,
                                         verbose_wait_s=plain.verbose_wait_s, compact_above=plain.compact_above,
                                         tally_every_s=plain.tally_every_s)
        self.reporter.print_plan(e.plan, e.prefix, title=e.description)
        self._what_changed(e)

    def _what_changed(self, e: PlanMade) -> None:
        """A real run says what changed since the nearest earlier version, as a dry run does (issue 19.8)."""
        from executor.tools.explain import note_changes

        new = sum(d.action == Action.RUN and d.observed.status is None for d in e.plan.decisions.values())
        if new > NOTES_UP_TO:
            self.reporter.plain(f"{new} new step ids; `stepgraph explain EXPERIMENT STEP` says why one changed")
        elif new:
            note_changes(e.graph, e.plan, e.prefix, e.fs, self.main_file, Events([self]))

    def _change_noted(self, e: ChangeNoted) -> None:
        if not self._changes_shown:
            self._changes_shown = True
            self.reporter.plain("what changed since the nearest earlier version:")
        self.reporter.plain(f"  {e.step}: {e.note}")

    def _drift_found(self, e: DriftFound) -> None:
        self.reporter.warning(e.message)

    def _shards_forecast(self, e: ShardsForecast) -> None:
        self.reporter.plain("shards (stored results whose address matches; each checked when copied):")
        for name, line in e.lines:
            self.reporter.plain(f"  {name}: {line}")

    def _standby_noted(self, e: StandbyNoted) -> None:
        self.reporter.plain(f"not needed here (every step that reads them is copied or complete): "
                            f"{', '.join(e.steps)}")

    def _mirror_planned(self, e: MirrorPlanned) -> None:
        from executor.engine.transfers.mirror import human_bytes

        if e.complete:
            self.reporter.plain(f"mirror {e.logical}: complete at {e.path}")
        elif e.waiting or e.source is None:
            self.reporter.plain(f"mirror {e.logical}: being copied by another runner; waiting for it")
        else:
            others = f" (also at {', '.join(e.also)})" if e.also else ""
            self.reporter.plain(f"mirror {e.logical}: copy {human_bytes(e.bytes or 0)} ({e.files} files) from "
                                f"{e.source}{others} to {e.path}")

    def _cross_region(self, e: CrossRegionNoted) -> None:
        if e.why is not None:
            self.reporter.warning(f"cross-region check: could not tell whether {e.step} reading {e.url} crosses "
                                  f"regions: {e.why}")
            return
        from executor.engine.transfers.regions import CrossRegionRead

        read = CrossRegionRead(e.step, e.url, e.location or "?", e.prefix_location or "?", e.bytes, e.size_problem)
        self.reporter.info(f"[yellow]cross-region read:[/] {escape(read.describe())}")

    def _transfer_refusal(self, e: TransferRefusal) -> None:
        self.reporter.warning(f"a run would be refused: {e.reason}")

    # -- --check, --update-plan, --explain -----------------------------------------------------
    def _ids_checked(self, e: IdsChecked) -> None:
        from pathlib import Path

        if e.ok:
            self.reporter.plain(f"ids check ok: {e.steps} step ids match {Path(e.path).name}")
            return
        self.reporter.plain(f"ids check FAILED: step ids differ from {e.path} "
                            f"({e.changed} changed, {e.added} added, {e.removed} removed)")
        for line in e.changes:
            self.reporter.plain("  " + line)
        self.reporter.plain(e.fix)

    def _experiment_checked(self, e: ExperimentChecked) -> None:  # `stepgraph check`, one file
        if e.exit_code is None:
            self.reporter.plain(f"{e.file}: no {e.ids_file}; not checked")
            return
        self.reporter.plain(f"{e.file}:")
        for line in e.lines:
            self.reporter.plain(f"  {line}")

    def _experiments_checked(self, e: ExperimentsChecked) -> None:
        if e.failed:
            self.reporter.plain(f"ids check failed for {len(e.failed)} of {e.checked} experiment(s): "
                                f"{', '.join(e.failed)}")
        else:
            self.reporter.plain(f"ids check ok for {e.checked} experiment(s)")

    def _ids_written(self, e: IdsWritten) -> None:
        self.reporter.plain(f"{e.path} is up to date ({e.steps} steps)" if e.up_to_date
                            else f"wrote {e.path} ({e.steps} steps); commit it with the change")

    def _step_explained(self, e: StepExplained) -> None:
        for line in e.lines:
            self.reporter.plain(line)

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
        if e.how == "failed":
            self.reporter.warning(e.error or f"mirror {e.logical}: not copied")
        elif e.how == "copied":
            from executor.engine.transfers.mirror import human_bytes

            self.reporter.plain(f"mirror {e.logical}: copied from {e.source} and checked "
                                f"({human_bytes(e.bytes or 0)}, {e.files} files, in {e.seconds or 0:.1f}s)")
        else:
            self.reporter.plain(f"mirror {e.logical}: {e.how} at {e.path}")

    def _log_line(self, e: LogLine) -> None:  # plain text: shown as written
        if e.level == "warning":
            self.reporter.warning(e.text)
        else:
            self.reporter.plain(f"error: {e.text}" if e.level == "error" else e.text)

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
            from executor.tools.console_reporter import echo_step_logs
            from executor.engine.runner.log_forwarding import forwarded

            echo_step_logs(self.reporter, result.graph, [s.step_id for s in result.steps if s.ran_here],
                           self.planned.fs, result.prefix, forwarded=forwarded)
        self._summary(result, self._write_report(result))

    def _nothing_ran(self, result: Any, seconds: float) -> None:
        if result.failed:
            self.reporter.print_plan(self.planned.plan, self.planned.prefix, title=self.planned.description)
            self.reporter.info(f"[red]{len(result.failed)} step(s) failed or blocked[/]: "
                               + escape(", ".join(s.name for s in result.failed)))
        else:
            self.reporter.plain(f"all {len(result.steps)} step(s) already succeeded; nothing to do ({seconds:.2f}s)")

    def _write_report(self, result: Any) -> str | None:
        from executor.engine.prefix.prefixes import OpenedPrefix, open_prefix
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
        self.reporter.plain(f"{succeeded}/{len(result.steps)} step(s) succeeded, {ran_here} ran here; "
                           f"run record: {result.run_file}" + (f"; report: {report_path}" if report_path else ""))
        failed = [s for s in result.steps if s.status.unsuccessful]
        if failed:
            self.reporter.info("[bold red]failed or blocked:[/] " + escape(", ".join(
                f"{s.step_id} ({s.error or ''})" for s in failed)))


_HANDLERS: dict[type, Callable[[ConsoleView, Any], None]] = {
    PlanMade: ConsoleView._plan_made, StepStarted: ConsoleView._step_started,
    StepFinished: ConsoleView._step_finished, StepWaiting: ConsoleView._step_waiting,
    StepRetried: ConsoleView._step_retried, LeaseLost: ConsoleView._lease_lost, LogLine: ConsoleView._log_line,
    MirrorCopied: ConsoleView._mirror_copied, RunFinished: ConsoleView._run_finished,
    ChangeNoted: ConsoleView._change_noted, DriftFound: ConsoleView._drift_found,
    ShardsForecast: ConsoleView._shards_forecast, StandbyNoted: ConsoleView._standby_noted, MirrorPlanned: ConsoleView._mirror_planned,
    CrossRegionNoted: ConsoleView._cross_region, TransferRefusal: ConsoleView._transfer_refusal,
    IdsChecked: ConsoleView._ids_checked, IdsWritten: ConsoleView._ids_written,
    ExperimentChecked: ConsoleView._experiment_checked, ExperimentsChecked: ConsoleView._experiments_checked,
    StepExplained: ConsoleView._step_explained}
