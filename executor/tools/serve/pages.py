"""The pages of `stepgraph serve`: overview, runs, one run's DAG, tags, one step; and their fragments.

A page names a step by an output directory the watcher listed and a run by a listed run file
name; anything else is a 404 (so no request can reach a path of its own making). The fragments
(`*_html`) are what live updates send, rendered by the same template macros as the page.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping

from aiohttp import web
from markupsafe import Markup

from executor.core.record import Absent, State
from executor.engine.prefix.prefix_view import LogRef, StepRow
from executor.tools.draw import COLORS, render_svg
from executor.tools.overview import duration as table_duration
from executor.tools.run_report import graph_plan, shard_counts, step_curves
from executor.tools.serve.keys import ENV, WATCHER
from executor.tools.serve.watch import PlannedRow, Watcher

PAGE_SIZE = 200
STATES = (State.RUNNING.value, State.SUCCESS.value, State.FAILED.value, Absent.CORRUPT.value, Absent.NO_STATUS.value)
STATE_COLORS = {State.RUNNING.value: "#f5c542", State.SUCCESS.value: "#7cc47f", State.FAILED.value: "#e57373",
                Absent.CORRUPT.value: "#b71c1c", Absent.NO_STATUS.value: "#dddddd"}
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"
LOG_CHUNK = 1 << 20


# -- formatting (template filters) ------------------------------------------------------------------

def when(then: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(then)) if then else "–"


def ago(then: float | None) -> str:
    if not then:
        return "–"
    seconds = max(0.0, time.time() - then)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago" if seconds < 7200 else f"{seconds / 3600:.1f} h ago"


def took(row: StepRow) -> float | None:
    """How long a step's last attempt took: its record's timing where read, else its status's
    start to its last write (writer's clock); None while it runs."""
    if row.seconds is not None:
        return row.seconds
    if row.state in (State.SUCCESS, State.FAILED) and row.started_at and row.written_at:
        return max(0.0, row.written_at - row.started_at)
    return None


def holder(row: StepRow) -> str:
    owner = row.owner
    return f"{owner.user}@{owner.host} pid {owner.pid}" if owner else "?"


def duration(seconds: float | None) -> str:
    return table_duration(seconds, missing="–")


# -- the overview ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Filter:
    state: str = ""
    q: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> "Filter":
        state = query.get("state", "")
        return cls(state if state in STATES else "", query.get("q", "").strip()[:200])

    def admits(self, row: StepRow | PlannedRow) -> bool:
        if self.state and row.state.value != self.state:
            return False
        return not self.q or self.q.lower() in row.step_id.lower()


def _render(request: web.Request, template: str, **context: Any) -> web.Response:
    watcher = request.app[WATCHER]
    context.setdefault("error", watcher.last_error)
    context.setdefault("since", watcher.refreshes)
    page = request.app[ENV].get_template(template).render(prefix=watcher.source.prefix, **context)
    return web.Response(text=page, content_type="text/html", charset="utf-8")


def overview_rows(watcher: Watcher) -> list[StepRow | PlannedRow]:
    """Every step with a status, and every step a listed run planned that never started."""
    return [*watcher.step_rows(), *watcher.planned_rows()]


def counts(watcher: Watcher) -> dict[str, int]:
    found = {state: 0 for state in STATES}
    for row in overview_rows(watcher):
        found[row.state.value] = found.get(row.state.value, 0) + 1
    return found


async def overview(request: web.Request) -> web.Response:
    watcher = request.app[WATCHER]
    await watcher.ensure_fresh()
    chosen = Filter.from_query(request.query)
    rows = [r for r in overview_rows(watcher) if chosen.admits(r)]
    keyed = sorted(((watcher.experiment(r), r.step_id, r) for r in rows), key=lambda k: (k[0], k[1]))
    pages = max(1, -(-len(keyed) // PAGE_SIZE))
    page = min(max(1, int_param(request.query.get("page"), 1)), pages)
    groups: dict[str, list[StepRow]] = {}
    for experiment, _, row in keyed[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]:
        groups.setdefault(experiment, []).append(row)
    return _render(request, "overview.html", watcher=watcher, groups=groups, counts=counts(watcher),
                   filter=chosen, states=STATES, matched=len(rows), page=page, pages=pages)


def int_param(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def step_row_html(request: web.Request, row: StepRow | PlannedRow) -> str:
    macros = request.app[ENV].get_template("_macros.html").module
    return str(macros.step_row(row, request.app[WATCHER]))


def group_html(request: web.Request, experiment: str) -> str:
    return str(request.app[ENV].get_template("_macros.html").module.group_row(experiment))


# -- runs -----------------------------------------------------------------------------------------

async def runs(request: web.Request) -> web.Response:
    watcher = request.app[WATCHER]
    await watcher.ensure_fresh()
    return _render(request, "runs.html", runs=watcher.run_rows())


def run_row_html(request: web.Request, key: str) -> str:
    row = request.app[WATCHER].runs.get(key)
    return str(request.app[ENV].get_template("_macros.html").module.run_row(row)) if row else ""


def _listed_run(request: web.Request) -> str:
    """The run file key of a listed run named in the URL (404 otherwise)."""
    name = request.match_info["name"]
    row = request.app[WATCHER].run(name)
    if row is None:
        raise web.HTTPNotFound(text="no run with this name is listed under this prefix\n")
    return row.key


async def run(request: web.Request) -> web.Response:
    watcher = request.app[WATCHER]
    await watcher.ensure_fresh()
    key = _listed_run(request)
    document = await asyncio.to_thread(watcher.source.run_document, key) or {}
    return _render(request, "run.html", run=watcher.runs[key], dag=dag_html(watcher, document),
                   steps=run_steps(watcher, document), colors=STATE_COLORS)


def run_steps(watcher: Watcher, document: Mapping[str, Any]) -> list[SimpleNamespace]:
    """Each step of a run with the state stored now (live), the run's decision, and whether listed."""
    views = []
    for entry in document.get("steps") or []:
        row = watcher.step(entry.get("step_id"))
        views.append(SimpleNamespace(name=entry.get("name", "?"), step_id=entry.get("step_id", "?"),
                                     listed=row is not None, decision=entry.get("decision") or "?",
                                     reason=entry.get("reason") or "",
                                     outcome=row.state.value if row else Absent.NO_STATUS.value))
    return views


def dag_html(watcher: Watcher, document: Mapping[str, Any]) -> Markup:
    """The run's DAG as the run report draws it, each step coloured by its stored state now."""
    views = run_steps(watcher, document)
    if not views:
        return Markup("<p>this run file lists no steps</p>")
    paint = lambda d: (d.outcome, STATE_COLORS.get(d.outcome, COLORS.get(d.action, "#eee")))  # noqa: E731
    return Markup(render_svg(graph_plan(dict(document), views), paint=paint))  # draw.py escapes its texts


async def run_report(request: web.Request) -> web.Response:
    """The run's stored report page, under a policy that allows no script at all."""
    key = _listed_run(request)
    page = await asyncio.to_thread(request.app[WATCHER].source.run_report, key)
    if page is None:
        raise web.HTTPNotFound(text="this run wrote no report page\n")
    return web.Response(body=page, content_type="text/html", charset="utf-8",
                        headers={"Content-Security-Policy": REPORT_CSP})


# -- tags -----------------------------------------------------------------------------------------

async def tags(request: web.Request) -> web.Response:
    """Every tag under the prefix and the step it points at now (a tag's history: `stepgraph tags`)."""
    watcher = request.app[WATCHER]
    await watcher.ensure_fresh()
    rows = [SimpleNamespace(entry=e, listed=watcher.step(e.step_id) is not None) for e in watcher.tags.rows()]
    return _render(request, "tags.html", tags=rows)


# -- one step -------------------------------------------------------------------------------------

def _listed_step(watcher: Watcher, step_id: str) -> StepRow:
    row = watcher.step(step_id)
    if row is None:
        raise web.HTTPNotFound(text="no step with this id is listed under this prefix\n")
    return row


async def step(request: web.Request) -> web.Response:
    watcher = request.app[WATCHER]
    await watcher.ensure_fresh()
    since = watcher.refreshes
    row = _listed_step(watcher, request.match_info["step_id"])
    detail = await asyncio.to_thread(step_detail, watcher, row)
    logs = await asyncio.to_thread(log_tails, watcher, row, detail["logs"])
    return _render(request, "step.html", row=row, detail=detail, logs=logs, since=since)


def step_detail(watcher: Watcher, row: StepRow) -> dict[str, Any]:
    """What the step page shows besides its logs (blocking reads: run on a thread)."""
    source = watcher.source
    full = source.step(row.step_id, watcher.step_rows(), watcher.run_rows())
    record = dict(full.record or {}) if full else {}
    link = lambda step_id: SimpleNamespace(step_id=step_id, listed=watcher.step(step_id) is not None)  # noqa: E731
    metrics, results = source.curves_data(row.rel)
    status_text = source.status_text(row.rel)
    return {"status": status_text, "record": _pretty(record) if record else None,
            "record_error": full.record_problem if full else None,
            "result": _pretty(record["result"]) if "result" in record else None,
            "shards": shard_counts(record.get("result")),
            "identity": _pretty(record["identity"]) if record.get("identity") else None,
            "deps": [link(s) for s in (full.dependencies if full else ())],
            "dependents": [link(s) for s in (full.dependents if full else ())],
            "curves": Markup("".join(step_curves(row.name, row.step_id, metrics, results))),  # run_report escapes
            "experiment": watcher.experiment(row), "tags": watcher.tags.of(row.step_id),
            "traceback": row.status.traceback_tail if row.status else None,
            "logs": full.logs if full else ()}


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=str)


def log_tails(watcher: Watcher, row: StepRow, logs: tuple[LogRef, ...]) -> list[SimpleNamespace]:
    """The tail of each attempt's log; the running attempt's is followed live from `size`."""
    tails = []
    for log_ref in logs:
        text, size, cut = watcher.source.log_tail(log_ref)
        tails.append(SimpleNamespace(attempt=log_ref.attempt, text=text, size=size, cut=cut,
                                     live=row.state == State.RUNNING and log_ref.attempt == row.attempt))
    return tails


def step_detail_html(request: web.Request, row: StepRow, detail: dict[str, Any]) -> str:
    macros = request.app[ENV].get_template("_macros.html").module
    return str(macros.step_detail(row, detail))


async def log(request: web.Request) -> web.StreamResponse:
    """A whole attempt log as plain text, streamed in chunks (a log may be large)."""
    watcher = request.app[WATCHER]
    await watcher.ensure_fresh()
    row = _listed_step(watcher, request.query.get("step", ""))
    attempt = int_param(request.query.get("attempt"), -1)
    logs = await asyncio.to_thread(watcher.source.logs, row.rel)
    log_ref = next((ref for ref in logs if ref.attempt == attempt), None)
    if log_ref is None:
        raise web.HTTPNotFound(text="no such attempt log for this step\n")
    size = await asyncio.to_thread(watcher.source.log_size, log_ref) or 0
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    await response.prepare(request)
    for start in range(0, size, LOG_CHUNK):
        await response.write(await asyncio.to_thread(watcher.source.log_bytes, log_ref, start,
                                                     min(size, start + LOG_CHUNK)))
    await response.write_eof()
    return response
