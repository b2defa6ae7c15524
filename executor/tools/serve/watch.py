"""The server's picture of its prefix, kept current at the cost of three listings per update.

A refresh lists the status files, the tag files and the run files with their generations (the read model's
listings), reads only the keys whose generation changed since the last refresh, and tells every
subscriber (an open page) which steps and runs changed. A page's read waits (up to FRESH_WAIT_S)
for a picture no older than the interval, so the first load after a run shows that run's end.
Steps a run planned that never started (blocked, or the run stopped first) have no status; they
are rows too (`planned_rows`), with the outcome their newest run gave them. What is held is one row per step and per
run (without its document) and a run id -> experiment map: memory follows the prefix, not the time
served.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable

from executor.core.record import Absent
from executor.engine.prefix.prefix_view import RunRow, StepRow
from executor.tools.serve.source import PrefixSource
from executor.tools.serve.tag_watch import TagWatch

QUEUE_LIMIT = 64  # batches a slow page may fall behind before it is told to reload
FRESH_WAIT_S = 5.0  # how long a page's read waits for a fresh picture before it shows the one it has


@dataclass(frozen=True)
class PlannedRow:
    """A step of a run's plan that has no status under the prefix: it never started."""

    step_id: str
    name: str
    run_id: str | None
    outcome: str  # what its newest run says of it: blocked, pending (the run stopped first), ...
    state: Absent = Absent.NO_STATUS
    planned: bool = True
    copied_from: None = None


@dataclass(frozen=True)
class Change:
    steps: frozenset[str] = frozenset()  # rels whose status changed or appeared
    removed: frozenset[str] = frozenset()  # step ids whose status is gone (gc, repair)
    runs: frozenset[str] = frozenset()  # run file keys that changed or appeared

    def __bool__(self) -> bool:
        return bool(self.steps or self.removed or self.runs)


@dataclass(eq=False)
class Subscription:
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))
    overflowed: bool = False
    closed: bool = False


class Watcher:
    def __init__(self, source: PrefixSource, interval_s: float = 2.0,
                 on_error: Callable[[str], None] | None = None):
        self.source = source
        self.interval_s = interval_s
        self.on_error = on_error  # told a failed refresh's whole message (pages show only its kind)
        self.steps: dict[str, StepRow] = {}  # output rel -> row (its generation is the status's)
        self.runs: dict[str, RunRow] = {}  # run file key -> row (its document dropped)
        self.by_step_id: dict[str, str] = {}  # step id -> rel
        self.experiment_of_run: dict[str, str] = {}
        self.tags = TagWatch()  # tags/: where each tag points now
        self.changed_in: dict[str, int] = {}  # rel or run key -> the refresh that last changed it
        self.refreshed_at = float("-inf")  # monotonic
        self.refreshes = 0
        self.last_error: str | None = None  # the kind of the last failed refresh's error, until one succeeds
        self.subscriptions: set[Subscription] = set()
        self._lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()

    # -- reading --------------------------------------------------------------------------------
    async def refresh(self) -> Change:
        async with self._lock:
            try:
                change = await asyncio.to_thread(self._refresh_blocking)
            except Exception as e:  # noqa: BLE001 - storage errors of all backends: shown, retried
                # a storage error's message may name an endpoint from the storage options: pages get its kind only
                self.last_error = type(e).__name__
                self.refreshed_at = time.monotonic()
                if self.on_error:
                    self.on_error(f"{type(e).__name__}: {e}")
                raise
            self.last_error = None
            self.refreshed_at = time.monotonic()
            self.refreshes += 1
        if change:
            self._publish(change)
        return change

    async def ensure_fresh(self, wait_s: float = FRESH_WAIT_S) -> None:
        """A page's read: a picture no older than the interval. An older one (nobody watched for a
        while: a run may have ended since) is refreshed, and the page waits for that refresh up to
        `wait_s`; storage slower than that gets the picture there is, and the page learns what the
        refresh changed through its live stream, which catches up from the refresh the page was
        rendered at. (Rendering the old picture at once, as this did before, showed the state
        before the run to the first load after it.) A failure leaves the picture in place and its
        error in `last_error`, which pages show."""
        if time.monotonic() - self.refreshed_at < self.interval_s:
            return
        asked_at = time.monotonic()
        if self.refreshes == 0:  # nothing to show yet: wait for it
            await self._refresh_quietly()
            return
        task = asyncio.create_task(self._refresh_after(asked_at))
        self._background.add(task)  # held until done (the loop keeps only weak references)
        task.add_done_callback(self._background.discard)
        await asyncio.wait({task}, timeout=wait_s)

    async def _refresh_after(self, asked_at: float) -> None:
        """A refresh that lists after `asked_at` (one already under way may have listed before)."""
        async with self._lock:
            fresh = self.refreshed_at >= asked_at
        if not fresh:
            await self._refresh_quietly()

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except Exception:  # noqa: BLE001 - recorded in last_error by refresh()
            pass

    def _refresh_blocking(self) -> Change:
        """One listing of statuses, one of tags/ and one of runs/; reads of only what changed or appeared."""
        number = self.refreshes + 1
        listed = self.source.list_steps()
        changed = [rel for rel, gen in listed.items() if rel not in self.steps or self.steps[rel].generation != gen]
        removed = []
        for rel in [rel for rel in self.steps if rel not in listed]:
            removed.append(self.steps.pop(rel).step_id)
            self.by_step_id.pop(removed[-1], None)
            self.changed_in.pop(rel, None)
        for row in self.source.steps(changed):
            if row.generation is None:  # deleted between the listing and the read
                self.steps.pop(row.rel, None)
                continue
            self.steps[row.rel] = row
            self.by_step_id[row.step_id] = row.rel
            self.changed_in[row.rel] = number
        retagged = {self.by_step_id[s] for s in self.tags.refresh(self.source.view.store) if s in self.by_step_id}
        for rel in retagged:
            self.changed_in[rel] = number
        changed = [*changed, *(retagged - set(changed))]
        listed_runs = self.source.list_runs()
        changed_runs = [key for key, gen in listed_runs.items()
                        if key not in self.runs or self.runs[key].generation != gen]
        for key in [k for k in self.runs if k not in listed_runs]:
            del self.runs[key]
            self.changed_in.pop(key, None)
        for row in self.source.runs(changed_runs):
            self.runs[row.key] = row
            self.changed_in[row.key] = number
            if row.run_id and row.experiment:
                self.experiment_of_run[row.run_id] = row.experiment
        return Change(frozenset(r for r in changed if r in self.steps), frozenset(removed),
                      frozenset(k for k in changed_runs if k in self.runs))

    # -- what pages ask -------------------------------------------------------------------------
    def step(self, step_id: str) -> StepRow | None:
        """A listed step by its step id (what pages and URLs name it by)."""
        rel = self.by_step_id.get(step_id)
        return self.steps.get(rel) if rel is not None else None

    def step_rows(self) -> list[StepRow]:
        return list(self.steps.values())

    def planned_rows(self, runs: list[RunRow] | None = None) -> list[PlannedRow]:
        """The steps the listed runs (or `runs`) planned that have no status here, each with the
        outcome of the newest run that planned it."""
        rows: dict[str, PlannedRow] = {}
        for run in runs if runs is not None else self.run_rows():  # newest first
            for step_id in (*run.graph, *run.outcomes):
                if step_id in self.by_step_id or step_id in rows:
                    continue
                outcome = run.outcomes.get(step_id)
                rows[step_id] = PlannedRow(step_id, step_id.rsplit("-", 1)[0], run.run_id,
                                           outcome.value if outcome else "not reached")
        return list(rows.values())

    def run_rows(self) -> list[RunRow]:
        return sorted(self.runs.values(), key=lambda r: r.started_at or 0, reverse=True)

    def run(self, name: str) -> RunRow | None:
        """A listed run by its name (<experiment>-<run id>, the file name without .json)."""
        return self.runs.get(f"runs/{name}.json")

    def experiment(self, row: StepRow) -> str:
        if not row.run_id:
            return "(no run: adopted or written by hand)"
        return self.experiment_of_run.get(row.run_id, "(run file not found)")

    # -- live updates ---------------------------------------------------------------------------
    def changed_since(self, refresh: int) -> Change:
        """What changed after the given refresh (a page rendered then catches up when it subscribes)."""
        if refresh >= self.refreshes:
            return Change()
        later = [key for key, n in self.changed_in.items() if n > refresh]
        return Change(frozenset(k for k in later if k in self.steps), runs=frozenset(k for k in later if k in self.runs))

    def subscribe(self) -> Subscription:
        subscription = Subscription()
        self.subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.discard(subscription)

    def close(self) -> None:
        """The server is stopping: every open stream ends (its page reconnects to the next server)."""
        for subscription in list(self.subscriptions):
            subscription.closed = True
            with contextlib.suppress(asyncio.QueueFull):
                subscription.queue.put_nowait(Change())
        self.subscriptions.clear()

    def _publish(self, change: Change) -> None:
        for subscription in list(self.subscriptions):
            try:
                subscription.queue.put_nowait(change)
            except asyncio.QueueFull:  # the page stopped reading: it reloads instead
                subscription.overflowed = True
                self.subscriptions.discard(subscription)

    async def poll_forever(self) -> None:
        """Refresh every interval while a page is open (nobody watching: no requests)."""
        while True:
            await asyncio.sleep(self.interval_s)
            if self.subscriptions and time.monotonic() - self.refreshed_at >= self.interval_s * 0.9:
                try:
                    await self.refresh()
                except Exception:  # noqa: BLE001 - a storage hiccup must not end the live view
                    await asyncio.sleep(self.interval_s)
