"""What happened to each step during a run, and when: a subscriber to the run's events.

Per step id it keeps the wall-clock times of waiting on another runner's lease, each start
(attempt, takeover), retries, and the end with its outcome. The run file stores these events, and
the run report (executor/tools/run_report.py) draws its timeline from them.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from executor.core.outcome import Outcome
from executor.engine.events import Event, StepFinished, StepRetried, StepStarted, StepWaiting


class TimelineRecorder:
    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._steps: dict[str, dict[str, Any]] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, StepWaiting) and event.first:
            self._entry(event.node).setdefault("lease_wait_from", self._clock())
        elif isinstance(event, StepStarted):
            entry = self._entry(event.node)
            self._wait_ended(entry)
            entry["starts"].append({"at": self._clock(), "attempt": event.attempt, "takeover": bool(event.takeover)})
        elif isinstance(event, StepRetried):
            self._entry(event.node)["retries"] += 1
        elif isinstance(event, StepFinished):
            entry = self._entry(event.node)
            self._wait_ended(entry)
            entry.update(ended_at=self._clock(), outcome=_stored_outcome(event))
            if event.cut_off:
                entry["cut_off"] = event.cut_off

    def _entry(self, node: Any) -> dict[str, Any]:
        return self._steps.setdefault(node.step_id, {"name": node.name, "starts": [], "retries": 0})

    def _wait_ended(self, entry: dict[str, Any]) -> None:
        if "lease_wait_from" in entry and "lease_wait_to" not in entry:
            entry["lease_wait_to"] = self._clock()

    def events(self) -> dict[str, dict[str, Any]]:
        return {step_id: dict(entry) for step_id, entry in self._steps.items()}


def _stored_outcome(event: StepFinished) -> str:
    """The run file's words (read by the run report): an outcome, "succeeded elsewhere" for a step
    another runner finished while this run waited on it."""
    if event.outcome == Outcome.SUCCEEDED and event.elsewhere:
        return "succeeded elsewhere"
    return event.outcome.value
