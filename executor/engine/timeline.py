"""What happened to each step during a run, and when: a reporter that records before it forwards.

Wraps the run's reporter; per step id it keeps the wall-clock times of waiting on another runner's
lease, each start (attempt, takeover), retries, and the end with its outcome. The run file stores
these events, and the run report (executor/tools/run_report.py) draws its timeline from them.
"""

from __future__ import annotations

import time
from typing import Any, Callable


class TimelineRecorder:
    def __init__(self, inner: Any, clock: Callable[[], float] = time.time):
        self._inner, self._clock = inner, clock
        self._steps: dict[str, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:  # everything not recorded goes straight through
        return getattr(self._inner, name)

    def _entry(self, node: Any) -> dict[str, Any]:
        return self._steps.setdefault(node.step_id, {"name": node.name, "starts": [], "retries": 0})

    def step_waiting(self, node, status, silent_s, ttl_s):
        self._entry(node).setdefault("lease_wait_from", self._clock())
        return self._inner.step_waiting(node, status, silent_s, ttl_s)

    def step_started(self, node, attempt, takeover, output_path):
        entry = self._entry(node)
        if "lease_wait_from" in entry and "lease_wait_to" not in entry:
            entry["lease_wait_to"] = self._clock()
        entry["starts"].append({"at": self._clock(), "attempt": attempt, "takeover": bool(takeover)})
        return self._inner.step_started(node, attempt, takeover, output_path)

    def step_retrying(self, node, error):
        self._entry(node)["retries"] += 1
        return self._inner.step_retrying(node, error)

    def _end(self, node: Any, outcome: str) -> None:
        entry = self._entry(node)
        if "lease_wait_from" in entry and "lease_wait_to" not in entry:
            entry["lease_wait_to"] = self._clock()
        entry.update(ended_at=self._clock(), outcome=outcome)

    def step_succeeded(self, node, seconds, result):
        self._end(node, "succeeded")
        return self._inner.step_succeeded(node, seconds, result)

    def step_failed(self, node, error, traceback_tail):
        self._end(node, "failed")
        return self._inner.step_failed(node, error, traceback_tail)

    def step_done_elsewhere(self, node, status):
        self._end(node, "succeeded elsewhere")
        return self._inner.step_done_elsewhere(node, status)

    def step_blocked(self, node, dependency):
        self._end(node, "blocked")
        return self._inner.step_blocked(node, dependency)

    def events(self) -> dict[str, dict[str, Any]]:
        return {step_id: dict(entry) for step_id, entry in self._steps.items()}
