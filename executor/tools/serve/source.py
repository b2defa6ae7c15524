"""Every read `stepgraph serve` makes of its prefix, behind one small class (reads only).

Steps, runs and one step in full come from the typed read model (engine/prefix/prefix_view.py); this
adds what only a live page needs: a run file's rows without its document, a train step's curves
files, and ranged reads of an attempt's log (to follow a running one from the byte a page ended
at). Every key read here comes from a listing (a step's output dir, a run file, a LogRef); none
is made from a request. Blocking calls: the server runs them on worker threads.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

from executor.core.errors import StatusError
from executor.core.record import parse_run_file
from executor.engine.prefix.prefixes import OpenedPrefix
from executor.engine.prefix.prefix_view import LogRef, RunRow, StepDetail, StepRow

LOG_TAIL_BYTES = 64 * 1024


class PrefixSource:
    """The prefix as the server reads it: listings with generations, then reads of listed keys."""

    def __init__(self, opened: OpenedPrefix):
        self.prefix, self.fs, self.view = opened.url, opened.fs, opened.view

    # -- steps and runs: the read model -----------------------------------------------------------
    def list_steps(self) -> dict[str, str]:
        """One listing: output dir -> generation of its status."""
        return self.view.list_steps()

    def steps(self, rels: Iterable[str]) -> list[StepRow]:
        return self.view.steps(list(rels))

    def list_runs(self) -> dict[str, str]:
        """One listing of runs/: run file key -> generation."""
        return self.view.list_runs()

    def runs(self, keys: Iterable[str]) -> list[RunRow]:
        """Those run files' rows, without the parsed document (the server keeps rows for hours)."""
        return [dataclasses.replace(row, document=None) for row in self.view.runs(keys=list(keys))]

    def run_document(self, key: str) -> dict[str, Any] | None:
        versioned = self.view.store.read(key)
        if versioned is None:
            return None
        try:
            return parse_run_file(versioned.data, self.view.path_of(key))
        except StatusError:
            return None

    def run_report(self, key: str) -> bytes | None:
        """The run's stored HTML report (runs/<name>.html beside its run file), if it wrote one."""
        versioned = self.view.store.read(key.removesuffix(".json") + ".html")
        return versioned.data if versioned else None

    def step(self, step_id: str, rows: list[StepRow], runs: list[RunRow]) -> StepDetail | None:
        return self.view.step(step_id, rows, runs)

    def status_text(self, rel: str) -> str | None:
        versioned = self.view.store.read(f"{rel}/.executor/status.json")
        return versioned.data.decode(errors="replace") if versioned else None

    # -- a train or eval step's curves --------------------------------------------------------------
    def _json(self, rel: str, name: str) -> Any:
        versioned = self.view.store.read(f"{rel}/{name}")
        try:
            return json.loads(versioned.data) if versioned else None
        except ValueError:
            return None

    def curves_data(self, rel: str) -> tuple[list[dict[str, Any]], Any]:
        """(metrics.jsonl rows, results.json) of a step's output (empty when it has none)."""
        versioned = self.view.store.read(f"{rel}/metrics.jsonl")
        rows = []
        for line in (versioned.data if versioned else b"").splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line being written
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows, self._json(rel, "results.json")

    # -- attempt logs: ranged reads, to follow a running attempt -----------------------------------
    def log_size(self, log: LogRef) -> int | None:
        try:
            return int(self.fs.size(self.view.path_of(log.key)))
        except FileNotFoundError:
            return None

    def log_bytes(self, log: LogRef, start: int, end: int | None = None) -> bytes:
        try:
            return self.fs.cat_file(self.view.path_of(log.key), start=start, end=end)
        except FileNotFoundError:
            return b""

    def log_tail(self, log: LogRef) -> tuple[str, int, bool]:
        """(the last LOG_TAIL_BYTES of an attempt's log, its size, whether its start was cut)."""
        size = self.log_size(log) or 0
        start = max(0, size - LOG_TAIL_BYTES)
        return self.log_bytes(log, start, size).decode(errors="replace"), size, start > 0

    def logs(self, rel: str) -> tuple[LogRef, ...]:
        return self.view.logs(rel)
