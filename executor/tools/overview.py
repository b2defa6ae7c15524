"""The tables `status` and `runs` print for people, from the read model's rows (engine/prefix/prefix_view.py).

The same typed rows give the `--json` output (their `to_json()`); this module only lays them out.
A run's command is shown as its experiment's path relative to the project (or its file name) and
its flags in full: when a line must be shorter, the middle of the path is cut, never a flag.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from typing import Any, Callable, Sequence

from executor.engine.prefix.prefix_view import PrefixView, RunRow, StepRow

ELLIPSIS = "…"
MIN_PATH = 24  # a path is never cut shorter than this (or its file name, if that is longer)


def step_rels(prefix: str, storage_options: dict | None) -> list[str]:
    """Output dirs (relative to the prefix) holding a status file; runs/ excluded."""
    return list(PrefixView.open(prefix, storage_options).list_steps())


def when(then: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(then)) if then else "-"


def duration(seconds: float | None, missing: str = "-") -> str:
    """How long something took, in the unit that reads best (the command line's tables and the served pages)."""
    if seconds is None:
        return missing
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def print_step_table(rows: Sequence[StepRow], say: Callable[[str], Any] = print) -> None:
    width = max([len(r.step_id) for r in rows] + [4])
    say(f"{'step':<{width}}  {'state':<11} {'finished':<19}  {'took':>8}  {'try':>3}  {'run':<24} last error")
    for r in rows:
        error = (r.error or "").replace("\n", " ")
        say(f"{r.step_id:<{width}}  {r.state.value:<11} {when(r.finished_at):<19}  {duration(r.seconds):>8}  "
            f"{r.attempt:>3}  {(r.run_id or '-'):<24} {error[:100]}")
        if r.cut_off:  # why it did not run ("cut off: ..."): its own line, never in the error column
            say(f"{'':<{width}}  {r.cut_off}")
        for label, value in (("alias of", r.alias_of), ("copied from", r.copied_from)):
            if value:  # where the output came from: its own labelled line, never in the error column
                say(f"{'':<{width}}  {label}: {value}")
    counts = Counter(r.state.value for r in rows)
    say(f"{len(rows)} step(s): " + ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items())))


def print_mirror_copies(rows: Sequence[dict], say: Callable[[str], Any] = print) -> None:
    """The mirrored inputs' copies under the prefix (PrefixView.mirror_copies), one line each; none: nothing."""
    from executor.engine.transfers.mirror import human_bytes

    if rows:
        say("mirrored inputs (copies under the prefix):")
    for r in rows:
        made = (f"from {r['source']}, {human_bytes(r['bytes'] or 0)} in {r['files']} files, run {r['run_id']}"
                if r.get("source") else "no record")
        say(f"  {r.get('logical') or r['path']}  {r.get('state') or 'no status'}  {made}  -> {r['path']}")


def print_run_table(rows: Sequence[RunRow], say: Callable[[str], Any] = print, width: int | None = None) -> None:
    """One line per run; `width` (default: the terminal's, or COLUMNS) bounds each line where the
    experiment's path can be shortened — flags are never cut, so a line may still be longer."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    readable = [r for r in rows if not r.problem]
    name_w = max([len(r.name) for r in readable] + [3])
    say(f"{'run':<{name_w}}  {'started':<19}  {'took':>8}  {'exit':>4}  {'ran':>4} {'failed':>6}  command")
    for r in rows:
        if r.problem:
            say(f"{r.path}: unreadable run file: {r.problem}")
            continue
        exit_code = "-" if r.exit_code is None else str(r.exit_code)
        line = (f"{r.name:<{name_w}}  {when(r.started_at):<19}  {duration(r.seconds):>8}  {exit_code:>4}  "
                f"{len(r.ran):>4} {len(r.failed):>6}  ")
        say(line + command_text(r, width - len(line)))


def command_text(run: RunRow, width: int | None = None) -> str:
    """`user@host: experiments/hello.py --greeting Howdy`: the experiment relative to its project,
    then every flag; past `width`, the middle of the experiment's path is cut, never a flag."""
    who = f"{run.user or '?'}@{run.host or '?'}: "
    flags = " ".join(run.flags)
    label = experiment_label(run)
    if width is not None:
        room = width - len(who) - len(flags) - (1 if flags else 0)
        label = cut_middle(label, max(room, MIN_PATH, len(os.path.basename(label))))
    return who + " ".join(part for part in (label, flags) if part)


def experiment_label(run: RunRow) -> str:
    """The experiment file as its path relative to its project (the folder holding its
    pyproject.toml or .git, where that folder is on this machine), else relative to the working
    directory of the run, else its file name."""
    from executor.engine.prefix.project import PROJECT_MARKERS

    script = run.argv[0] if run.argv else (run.experiment_file or run.experiment or "?")
    full = os.path.normpath(os.path.join(run.cwd or "", script)) if not os.path.isabs(script) else script
    folder = os.path.dirname(full)
    while folder and os.path.dirname(folder) != folder:
        if any(os.path.exists(os.path.join(folder, marker)) for marker in PROJECT_MARKERS):
            return os.path.relpath(full, folder)
        folder = os.path.dirname(folder)
    if run.cwd and full.startswith(run.cwd.rstrip("/") + "/"):
        return os.path.relpath(full, run.cwd)
    return os.path.basename(full) if os.path.isabs(full) else full


def cut_middle(text: str, width: int) -> str:
    """`text` in at most `width` characters: its start and its end (the file name), the middle
    replaced by an ellipsis."""
    if len(text) <= width:
        return text
    tail = min(len(os.path.basename(text)), width - 1)
    tail = max(tail, (width - 1) // 2)
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + text[len(text) - tail:]
