"""Live updates: one server-sent event stream per open page (`/events?view=...&since=N`).

The watcher's refreshes say which steps and runs changed; each stream turns that into the
fragments its page shows (rows of the overview or of the runs table, a step's detail, a run's
DAG), rendered by the same templates as the page. A step page's stream also follows the log of
the running attempt from the byte the page ended at. A page that falls behind is told to reload.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from aiohttp import web

from executor.engine.prefix.prefix_view import LogRef
from executor.tools.serve import pages
from executor.tools.serve.keys import WATCHER
from executor.tools.serve.watch import Change, Subscription, Watcher

KEEPALIVE_S = 15.0
LOG_EVENT_BYTES = 64 * 1024
KEEPALIVE = b": keep-alive\n\n"
CATCH_UP_LIMIT = pages.PAGE_SIZE  # changes a page may have missed before it is told to reload


def _event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


async def events(request: web.Request) -> web.StreamResponse:
    watcher = request.app[WATCHER]
    follow = _FOLLOWERS.get(request.query.get("view", "overview"))
    if follow is None:
        raise web.HTTPNotFound(text="no such live view\n")
    subscription = watcher.subscribe()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    try:
        await response.prepare(request)
        await response.write(b"retry: 2000\n\n")
        async for chunk in _reloading(follow(request, subscription, pages.int_param(request.query.get("since"), 0))):
            await response.write(chunk)
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the page went away
    finally:
        watcher.unsubscribe(subscription)
    return response


class _Reload(Exception):
    """The page must reload: it fell behind, or what it shows changed shape (a new attempt)."""


async def _reloading(follower: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for chunk in follower:
            yield chunk
    except _Reload:
        yield _event("reload", {})


async def _changes(request: web.Request, subscription: Subscription, since: int,
                   tick_s: float | None = None) -> AsyncIterator[Change | None]:
    """What changed since the page was rendered, then each refresh's change (None: a quiet tick)."""
    first = request.app[WATCHER].changed_since(since)
    if len(first.steps) > CATCH_UP_LIMIT:  # a page that old is cheaper to load again
        raise _Reload()
    if first:
        yield first
    while not subscription.closed:
        if subscription.overflowed:
            raise _Reload()
        try:
            change = await asyncio.wait_for(subscription.queue.get(), timeout=tick_s or KEEPALIVE_S)
        except asyncio.TimeoutError:
            change = None
        if not subscription.closed:
            yield change


async def follow_overview(request: web.Request, subscription: Subscription, since: int) -> AsyncIterator[bytes]:
    watcher = request.app[WATCHER]
    chosen = pages.Filter.from_query(request.query)
    async for change in _changes(request, subscription, since):
        if change is None:
            yield KEEPALIVE
            continue
        rels = set(change.steps)
        if len(rels) > CATCH_UP_LIMIT:  # a big run started or ended: the page's rows are cheaper to load again
            raise _Reload()
        planned = []
        if change.runs:  # a run file that appeared names the experiment of the steps it wrote
            run_ids = {watcher.runs[key].run_id for key in change.runs if key in watcher.runs}
            rels |= {r.rel for r in watcher.step_rows() if r.run_id in run_ids}
            planned = [r for r in watcher.planned_rows() if r.run_id in run_ids]  # never started
        for row in planned:
            if chosen.admits(row):
                experiment = watcher.experiment(row)
                yield _event("step", {"id": row.step_id, "group": experiment, "html": pages.step_row_html(request, row),
                                      "group_html": pages.group_html(request, experiment)})
        for rel in sorted(rels):
            row = watcher.steps.get(rel)
            if row is None:
                continue
            if not chosen.admits(row):
                yield _event("remove", {"id": row.step_id})
                continue
            experiment = watcher.experiment(row)
            yield _event("step", {"id": row.step_id, "group": experiment, "html": pages.step_row_html(request, row),
                                  "group_html": pages.group_html(request, experiment)})
        for step_id in sorted(change.removed):
            yield _event("remove", {"id": step_id})
        yield _event("counts", {"states": pages.counts(watcher),
                                "matched": sum(1 for row in pages.overview_rows(watcher) if chosen.admits(row))})


async def follow_runs(request: web.Request, subscription: Subscription, since: int) -> AsyncIterator[bytes]:
    watcher = request.app[WATCHER]
    async for change in _changes(request, subscription, since):
        if change is None:
            yield KEEPALIVE
            continue
        for key in sorted(change.runs):
            if key in watcher.runs:
                yield _event("run", {"id": watcher.runs[key].name, "html": pages.run_row_html(request, key)})


async def follow_run(request: web.Request, subscription: Subscription, since: int) -> AsyncIterator[bytes]:
    watcher = request.app[WATCHER]
    run = watcher.run(request.query.get("run", ""))
    if run is None:
        return
    document = await asyncio.to_thread(watcher.source.run_document, run.key) or {}
    step_ids = {entry.get("step_id") for entry in document.get("steps") or []}
    async for change in _changes(request, subscription, since):
        if change is None:
            yield KEEPALIVE
            continue
        touched = {watcher.steps[rel].step_id for rel in change.steps if rel in watcher.steps}
        if touched & step_ids:
            yield _event("dag", {"html": str(pages.dag_html(watcher, document))})


async def follow_step(request: web.Request, subscription: Subscription, since: int) -> AsyncIterator[bytes]:
    """The step's detail on each change of its status; its running attempt's new log lines each tick."""
    watcher = request.app[WATCHER]
    step_id = request.query.get("step", "")
    row = watcher.step(step_id)
    if row is None:
        return
    attempt, offset, log_ref = row.attempt, pages.int_param(request.query.get("offset"), 0), None
    async for change in _changes(request, subscription, since, tick_s=watcher.interval_s):
        row = watcher.step(step_id)
        if row is None:  # deleted (gc, repair): the page's picture is final
            return
        touched = change is not None and row.rel in change.steps
        if touched:
            if row.attempt != attempt:  # a new attempt: its log section is a new one
                raise _Reload()
            detail = await asyncio.to_thread(pages.step_detail, watcher, row)
            yield _event("detail", {"html": pages.step_detail_html(request, row, detail), "state": row.state.value})
        text = ""
        if row.state.value == "RUNNING" or touched:  # touched: the last lines written as it ended
            if log_ref is None:
                logs = await asyncio.to_thread(watcher.source.logs, row.rel)
                log_ref = next((ref for ref in logs if ref.attempt == attempt), None)
            if log_ref is not None:
                text, offset = await asyncio.to_thread(_new_log_text, watcher, log_ref, offset)
            if text:
                yield _event("log", {"attempt": attempt, "text": text})
        if not touched and not text:
            yield KEEPALIVE


def _new_log_text(watcher: Watcher, log_ref: LogRef, offset: int) -> tuple[str, int]:
    """Bytes appended to the attempt's log since `offset` (at most LOG_EVENT_BYTES: the rest is
    said to be skipped), decoded up to the last whole line."""
    size = watcher.source.log_size(log_ref)
    if size is None or size <= offset:
        return "", offset
    skipped = max(0, size - offset - LOG_EVENT_BYTES)
    data = watcher.source.log_bytes(log_ref, offset + skipped, size)
    cut = data.rfind(b"\n") + 1
    if cut == 0:  # no whole line yet
        return "", offset
    note = f"… {skipped} bytes skipped …\n" if skipped else ""
    return note + data[:cut].decode(errors="replace"), offset + skipped + cut


_FOLLOWERS = {"overview": follow_overview, "runs": follow_runs, "run": follow_run, "step": follow_step}
