"""Presentation is the console's (issue 45.4): the engine emits data, the dry run reports through events
a library caller can subscribe to, and the console renderer escapes every text it is handed."""

from __future__ import annotations

import dataclasses
import io
import re
from dataclasses import dataclass
from typing import Any

from executor import ExecutorStep, api, this_output_path
from executor.core.plan import Action
from executor.engine.events import (ChangeNoted, CrossRegionNoted, DriftFound, LogLine, MirrorCopied,
                                    PlanMade, StepExplained, TransferRefusal)
from executor.tools.console_reporter import ConsoleReporter
from executor.tools.console_view import ConsoleView
from executor.tools.dry_run import dry_run
from tests.executor.test_regions import eu_object  # noqa: F401  (fixture)
from tests.emulators import S3_REGION, s3_emulator  # noqa: F401  (session fixture)


@dataclass(frozen=True)
class Counted:
    output_path: Any
    n: int = 1


def counted(config: Counted) -> dict:
    return {"n": config.n}


def steps(n: int) -> list[ExecutorStep]:
    return [ExecutorStep("present/count", counted, Counted(this_output_path(), n)),
            ExecutorStep("present/fixed", counted, Counted(this_output_path()))]


def test_a_subscriber_gets_the_dry_run_plan_as_events_and_nothing_is_printed(tmp_path, capfd):
    prefix = str(tmp_path / "prefix")
    assert api.run(steps(1), prefix=prefix, runner="inline").ok
    capfd.readouterr()

    seen: list[Any] = []
    planned = dry_run(steps(2), api.Options(prefix=prefix), subscribers=[seen.append], environ={})

    assert [type(e) for e in seen] == [PlanMade, ChangeNoted], seen
    made, change = seen
    assert made.dry_run and made.plan is planned.plan and made.prefix == prefix
    assert {d.node.name: d.action for d in made.plan.decisions.values()} == {
        "present/count": Action.RUN, "present/fixed": Action.SKIP}
    assert change.step == "present/count" and "config.n: 1 -> 2" in change.note, change
    assert capfd.readouterr() == ("", "")  # the library prints nothing; the events hold the plan


def test_the_command_line_dry_run_renders_those_events(tmp_path, capsys):
    from executor.cli import run

    prefix = str(tmp_path / "prefix")
    assert api.run(steps(1), prefix=prefix, runner="inline").ok
    assert run(steps(2), argv=["--prefix", prefix, "--dry-run"], environ={}, main_file=__file__) == 0
    out = capsys.readouterr().out
    assert out.index(f"prefix: {prefix}") < out.index("present/fixed") < out.index("what changed since")
    assert "  present/count: " in out.split("what changed since the nearest earlier version:")[1]


# Console markup as rich reads it: a closing tag, a style tag, or an escaped bracket.
MARKUP = re.compile(r"\[/|\[(?:bold|dim|italic|red|green|yellow|cyan|blue|magenta)\b|\\\[")


def strings_in(value: Any, depth: int = 0) -> list[str]:
    """Every string an event carries in its own fields (its node, plan and result are the engine's data
    structures, not text it wrote)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (tuple, list)):
        return [s for v in value for s in strings_in(v, depth)]
    if dataclasses.is_dataclass(value) and depth == 0:
        return [s for f in dataclasses.fields(value) if f.name not in ("node", "graph", "plan", "result", "fs")
                for s in strings_in(getattr(value, f.name), depth + 1)]
    return []


def test_no_event_of_a_run_with_a_cross_region_read_and_notes_holds_markup(eu_object, s3_emulator, tmp_path):
    source_prefix = s3_emulator.fresh_prefix("present")
    step = ExecutorStep("present/copy", copied, CopyConfig(eu_object, this_output_path()))
    seen: list[Any] = []
    assert api.run([step], prefix=source_prefix, runner="inline", subscribers=[seen.append]).ok
    again = s3_emulator.fresh_prefix("present-copy")  # copied from the first: a note per copy
    assert api.run([step], prefix=again, runner="inline", cache_from=(source_prefix,),
                   subscribers=[seen.append]).ok

    kinds = {type(e) for e in seen}
    assert CrossRegionNoted in kinds and LogLine in kinds, kinds  # the pipeline had both
    read = next(e for e in seen if isinstance(e, CrossRegionNoted))
    assert (read.step, read.url, read.location, read.prefix_location, read.bytes) == (
        "present/copy", eu_object, "EU-WEST-1", S3_REGION.upper(), 3000)
    assert any(isinstance(e, LogLine) and e.text.startswith("present/copy: copying") for e in seen), seen
    marked = [(type(e).__name__, s) for e in seen for s in strings_in(e) if MARKUP.search(s)]
    assert not marked, marked


@dataclass(frozen=True)
class CopyConfig:
    source: str
    output_path: Any


def copied(config: CopyConfig) -> dict:
    from executor.engine.prefix.location import open_file

    with open_file(config.source, "rb") as src, open_file(config.output_path + "/copy.bin", "wb") as dst:
        dst.write(src.read())
    return {"bytes": 3000}


def test_text_from_a_step_shows_literally_on_the_console():
    """A name, error, note or path with rich markup in it is printed as written, never styled away.
    (Step names are checked to hold no brackets; events carry any string, so the renderer escapes all.)"""
    buffer = io.StringIO()
    view = ConsoleView(ConsoleReporter(_console(buffer)))
    marked = "[red]x[/red]"
    for event in (ChangeNoted(marked, f"config.n: {marked} -> 2"), StepExplained(marked, (f"{marked}: new id",)),
                  DriftFound(marked, f"{marked}-abc", "f", f"{marked}: f changed"), LogLine("info", f"note {marked}"),
                  LogLine("warning", f"warn {marked}"), LogLine("error", f"err {marked}"),
                  CrossRegionNoted(marked, f"s3://b/{marked}", "EU", "US", 1), TransferRefusal(f"over {marked}"),
                  MirrorCopied(f"s3://b/{marked}", "mirror/b", "already complete")):
        view(event)
    out = buffer.getvalue()
    for line in (f"  {marked}: config.n: {marked} -> 2", f"{marked}: new id", f"warning: {marked}: f changed",
                 f"note {marked}", f"warning: warn {marked}", f"error: err {marked}",
                 f"cross-region read: {marked} reads s3://b/{marked}", f"warning: a run would be refused: over {marked}",
                 f"mirror s3://b/{marked}: already complete at mirror/b"):
        assert line in out, (line, out)


def test_a_failing_steps_markup_and_a_prefix_with_brackets_show_literally(tmp_path, capsys):
    from executor.cli import run

    prefix = str(tmp_path / "runs[red]x[/red]")
    assert run([ExecutorStep("present/bad", shout, Counted(this_output_path()))],
               argv=["--prefix", prefix, "--runner", "inline"], environ={}, main_file=__file__) == 1
    out = capsys.readouterr().out
    assert f"prefix: {prefix}" in out
    assert "present/bad failed: ValueError: [bold]loud[/bold]" in out, out


def shout(config: Counted) -> dict:
    raise ValueError("[bold]loud[/bold]")


def _console(buffer: io.StringIO) -> Any:
    from rich.console import Console

    return Console(file=buffer, force_terminal=False, width=300, highlight=False, soft_wrap=True)
