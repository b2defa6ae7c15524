"""What the run loop promises each step, on the inline runner (found unguarded by mutation testing of
executor/engine/execute.py, scripts/mutation.sh): its declared timeout, its user retries (as many as
declared, no more), the seconds its end reports, a record that lists runner tries only when the
runner made some, and a commit the store refuses failing that step alone, not the run."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import executor
from executor import ExecutorStep, Resources, this_output_path
from executor.core.outcome import Outcome
from executor.engine import location
from executor.engine.events import StepFinished
from executor.engine.store import StoreError


@dataclass(frozen=True)
class Nap:
    output_path: Any
    seconds: float


def nap(config: Nap) -> dict:
    time.sleep(config.seconds)
    return {"slept": config.seconds}


@dataclass(frozen=True)
class Flaky:
    output_path: Any
    calls_file: str
    failures: int  # the first this many calls raise (a user error)


def fail_then_succeed(config: Flaky) -> dict:
    calls = Path(config.calls_file)
    n = len(calls.read_text()) + 1 if calls.exists() else 1
    calls.write_text("x" * n)
    if n <= config.failures:
        raise ValueError(f"call {n} fails on purpose")
    return {"calls": n}


def statuses(result) -> dict[str, Outcome]:
    return {s.name: s.status for s in result.steps}


def test_a_step_past_its_timeout_is_cancelled_and_failed(tmp_path):
    step = ExecutorStep("sleepy", nap, Nap(this_output_path(), 30.0), resources=Resources(timeout_s=1))
    started = time.monotonic()
    result = executor.run([step], prefix=str(tmp_path), runner="inline")
    took = time.monotonic() - started
    [report] = result.steps
    assert report.status == Outcome.FAILED and report.error == "timed out after 1s (resources.timeout_s)", report
    assert took < 20, f"the run took {took:.1f}s: the step was not cancelled at its timeout"


def test_user_errors_are_retried_as_many_times_as_declared(tmp_path):
    calls = tmp_path / "calls"
    step = ExecutorStep("flaky", fail_then_succeed, Flaky(this_output_path(), str(calls), failures=2),
                        resources=Resources(retry_user_errors=2))
    result = executor.run([step], prefix=str(tmp_path / "prefix"), runner="inline")
    assert statuses(result) == {"flaky": Outcome.SUCCEEDED} and len(calls.read_text()) == 3


def test_a_step_failing_past_its_retries_fails_after_exactly_them(tmp_path):
    """One retry declared: two calls, then FAILED (the step would succeed at its sixth call, so a
    loop that kept retrying ends too, as a success this test refuses)."""
    calls = tmp_path / "calls"
    step = ExecutorStep("flaky", fail_then_succeed, Flaky(this_output_path(), str(calls), failures=5),
                        resources=Resources(retry_user_errors=1))
    result = executor.run([step], prefix=str(tmp_path / "prefix"), runner="inline")
    [report] = result.steps
    assert report.status == Outcome.FAILED and "call 2 fails on purpose" in report.error, report
    assert len(calls.read_text()) == 2


def test_a_finished_step_reports_the_seconds_it_ran(tmp_path):
    seen: list[Any] = []
    started = time.monotonic()
    result = executor.run([ExecutorStep("nap", nap, Nap(this_output_path(), 0.3))], prefix=str(tmp_path),
                          runner="inline", subscribers=[seen.append])
    took = time.monotonic() - started
    assert result.ok
    [finished] = [e for e in seen if isinstance(e, StepFinished)]
    assert 0.3 <= finished.seconds <= took, (finished.seconds, took)


def test_a_record_lists_runner_tries_only_when_the_runner_made_some(tmp_path):
    """The inline runner makes one try and reports none; a Ray step's record lists its tries with
    their causes (runner/test_ray_cluster.py::test_killed_worker_is_retried_and_attempts_recorded)."""
    assert executor.run([ExecutorStep("nap", nap, Nap(this_output_path(), 0.0))], prefix=str(tmp_path),
                        runner="inline").ok
    [record] = tmp_path.glob("nap-*/.executor/record.json")
    assert "attempts" not in json.loads(record.read_text())["extra"]


class RefusesSuccess:
    """A store that refuses (permanently) to commit a SUCCESS status of one step."""

    def __init__(self, inner, step: str):
        self.inner, self.step = inner, step

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        if key.startswith(f"{self.step}-") and json.loads(data)["state"] == "SUCCESS":
            raise StoreError(f"scripted: {key} cannot be written")
        return self.inner.replace_if_generation(key, data, generation)


def test_a_commit_the_store_refuses_fails_that_step_not_the_run(tmp_path, monkeypatch):
    open_raw = location.open_raw_store
    monkeypatch.setattr(location, "open_raw_store", lambda prefix, options=None: RefusesSuccess(
        open_raw(prefix, options), "refused"))
    steps = [ExecutorStep("refused", nap, Nap(this_output_path(), 0.0)),
             ExecutorStep("fine", nap, Nap(this_output_path(), 0.5))]
    result = executor.run(steps, prefix=str(tmp_path), runner="inline", max_concurrent=1)
    assert result.runner_error is None
    assert statuses(result) == {"refused": Outcome.FAILED, "fine": Outcome.SUCCEEDED}
    [refused] = [s for s in result.steps if s.name == "refused"]
    assert refused.error.startswith("could not commit: StoreError: scripted:"), refused.error
    [status] = tmp_path.glob("refused-*/.executor/status.json")
    assert json.loads(status.read_text())["state"] == "FAILED"
