"""What the run loop promises each step, on the inline runner (found unguarded by mutation testing of
executor/engine/run/execute.py, scripts/mutation.sh): its declared timeout, its user retries (as many as
declared, no more), the seconds its end reports, a record that lists runner tries only when the
runner made some, a commit the store refuses failing that step alone, not the run, and an error of
the runner itself ending the run honestly (every running step failed with the reason, its lease
released, the error in the result), and the record's config as JSON."""

from __future__ import annotations

import enum
import functools
import json
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import pytest

import executor
from executor import ExecutorStep, Resources, output_path_of, secret, this_output_path
from executor.core.outcome import Outcome
from executor.engine.run import execute, signals
from executor.engine.prefix import location, outputs
from executor.engine.events import LeaseLost, LogLine, StepFinished, StepRetried, StepStarted
from executor.engine.runner import factory
from executor.core.record import State, Status, status_key
from executor.engine.store import StoreError
from executor.engine.store.local import LocalStore


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


def test_a_step_past_its_timeout_is_cancelled_and_failed(tmp_path, monkeypatch):
    """Policed while it runs, whatever steps before it have ended (`quick` is tracked first); on the
    real clock, polled every 0.05 s."""
    run_context_with(monkeypatch, poll_s=0.05)
    steps = [ExecutorStep("quick", nap, Nap(this_output_path(), 0.0)),
             ExecutorStep("sleepy", nap, Nap(this_output_path(), 30.0), resources=Resources(timeout_s=0.25))]
    started = time.monotonic()
    result = executor.run(steps, prefix=str(tmp_path), runner="inline")
    took = time.monotonic() - started
    [quick, sleepy] = result.steps
    assert quick.status == Outcome.SUCCEEDED, quick
    assert sleepy.status == Outcome.FAILED and sleepy.error == "timed out after 0.25s (resources.timeout_s)", sleepy
    assert took < 20, f"the run took {took:.1f}s: the step was not cancelled at its timeout"


def run_context_with(monkeypatch, **fields) -> None:
    """The run loop's context with `fields` in place of the defaults executor.api leaves to it (its
    clock, its poll interval): executor.api builds its RunContext from executor.engine.run.execute."""
    monkeypatch.setattr(execute, "RunContext", functools.partial(execute.RunContext, **fields))


@pytest.mark.parametrize("elapsed, ends", [(1.0, Outcome.SUCCEEDED), (2.0, Outcome.SUCCEEDED), (2.001, Outcome.FAILED)])
def test_a_step_times_out_only_once_past_its_timeout(tmp_path, monkeypatch, elapsed, ends):
    """docs/cli.md: a step that ran *past* Resources(timeout_s) fails; within it, or at exactly
    timeout_s, it has not. The loop's clock reads 100 when the step starts and 100 + `elapsed` at
    every check after; it checks every 0.05 s, so several times while the step naps."""
    readings = iter([100.0])
    run_context_with(monkeypatch, clock=lambda: next(readings, 100.0 + elapsed), poll_s=0.05)
    step = ExecutorStep("timed", nap, Nap(this_output_path(), 0.5), resources=Resources(timeout_s=2))
    [report] = executor.run([step], prefix=str(tmp_path), runner="inline").steps
    assert report.status == ends, report
    assert report.error == (None if ends == Outcome.SUCCEEDED else "timed out after 2s (resources.timeout_s)")


def test_a_failure_is_final_the_loop_does_not_time_out_a_step_that_ended(tmp_path, monkeypatch):
    """A step that failed on its own keeps its reason, in the result and its status: the loop
    polices running steps only (the loop's clock here jumps far past the step's timeout the moment
    its end is reported, and the run's last pass still polices once after it)."""
    ends: list[StepFinished] = []
    run_context_with(monkeypatch, clock=lambda: 10.0 if ends else 0.0, poll_s=0.05)
    step = ExecutorStep("fails", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1),
                        resources=Resources(timeout_s=2))
    result = executor.run([step], prefix=str(tmp_path / "prefix"), runner="inline",
                          subscribers=[lambda e: ends.append(e) if isinstance(e, StepFinished) else None])
    [report] = result.steps
    assert report.status == Outcome.FAILED and report.error == "ValueError: call 1 fails on purpose", report
    assert [e.error for e in ends] == ["ValueError: call 1 fails on purpose"]
    [status] = (tmp_path / "prefix").glob("fails-*/.executor/status.json")
    assert json.loads(status.read_text())["error"] == "ValueError: call 1 fails on purpose"


def test_steps_that_ended_while_another_runs_stay_as_they_ended(tmp_path, monkeypatch):
    """`fails` fails and `quick` succeeds while `slow` still runs: neither is waited on, committed or
    policed again afterwards (the loop's clock jumps far past quick's timeout once both have ended):
    each step ends once, no lease is reported lost, and quick's committed SUCCESS stays."""
    events: list = []

    def both_ended() -> bool:
        return {e.name for e in events if isinstance(e, StepFinished)} >= {"fails", "quick"}

    run_context_with(monkeypatch, clock=lambda: 100.0 if both_ended() else 0.0, poll_s=0.05)
    steps = [ExecutorStep("fails", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1)),
             ExecutorStep("quick", nap, Nap(this_output_path(), 0.0), resources=Resources(timeout_s=5)),
             ExecutorStep("slow", nap, Nap(this_output_path(), 1.0))]
    result = executor.run(steps, prefix=str(tmp_path / "prefix"), runner="inline", subscribers=[events.append])
    assert statuses(result) == {"fails": Outcome.FAILED, "quick": Outcome.SUCCEEDED, "slow": Outcome.SUCCEEDED}
    assert sorted(e.name for e in events if isinstance(e, StepFinished)) == ["fails", "quick", "slow"]
    assert [e for e in events if isinstance(e, LeaseLost)] == []
    [quick] = (tmp_path / "prefix").glob("quick-*/.executor/status.json")
    assert json.loads(quick.read_text())["state"] == "SUCCESS"


def test_a_retry_is_announced_with_the_error_that_caused_it(tmp_path):
    events: list = []
    step = ExecutorStep("flaky", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1),
                        resources=Resources(retry_user_errors=1))
    assert executor.run([step], prefix=str(tmp_path / "prefix"), runner="inline", subscribers=[events.append]).ok
    assert [(e.name, e.error) for e in events if isinstance(e, StepRetried)] == [
        ("flaky", "ValueError: call 1 fails on purpose")]


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


@pytest.mark.parametrize("resources, says", [
    (Resources(retry_user_errors=-1), "resources.retry_user_errors must be a whole number >= 0, got -1"),
    (Resources(max_infra_retries=1.5), "resources.max_infra_retries must be a whole number >= 0, got 1.5"),
    (Resources(hosts=0), "resources.hosts must be a whole number >= 1, got 0"),
    (Resources(hosts=True), "resources.hosts must be a whole number >= 1, got True"),
    (Resources(cpus=-1), "resources.cpus must be a number >= 0, got -1"),
    (Resources(gpus=float("nan")), "resources.gpus must be a number >= 0, got nan"),
    (Resources(gpus="1"), "resources.gpus must be a number >= 0, got '1'"),
    (Resources(timeout_s=0), "resources.timeout_s must be a number of seconds > 0, or None for no limit; got 0"),
    (Resources(memory_bytes=-5), "resources.memory_bytes must be a number of bytes > 0, or None for no limit; got -5"),
])
def test_resources_no_runner_could_honour_are_refused_naming_the_step_the_field_and_the_value(resources, says):
    """Taken silently before: a negative retry count as none, a timeout of 0 as no limit at all."""
    with pytest.raises(ValueError) as refused:
        ExecutorStep("flaky", fail_then_succeed, Flaky(this_output_path(), "calls", failures=1), resources=resources)
    assert str(refused.value) == f"step 'flaky': {says}"
    fine = Resources(cpus=0.5, gpus=0, hosts=1, max_infra_retries=0, retry_user_errors=0, timeout_s=0.1,
                     memory_bytes=1)
    assert fine.problem is None and Resources().problem is None


def test_a_finished_step_reports_the_seconds_it_ran(tmp_path):
    """In its StepFinished event and in its record's timings (with the wall-clock start and end)."""
    seen: list[Any] = []
    started, wall_started = time.monotonic(), time.time()
    result = executor.run([ExecutorStep("nap", nap, Nap(this_output_path(), 0.3))], prefix=str(tmp_path),
                          runner="inline", subscribers=[seen.append])
    took, wall_ended = time.monotonic() - started, time.time()
    assert result.ok
    [finished] = [e for e in seen if isinstance(e, StepFinished)]
    assert 0.3 <= finished.seconds <= took, (finished.seconds, took)
    [record] = tmp_path.glob("nap-*/.executor/record.json")
    timings = json.loads(record.read_text())["timings"]
    assert 0.3 <= timings["seconds"] <= took, (timings, took)
    assert wall_started <= timings["started_at"] <= timings["finished_at"] - 0.3 <= wall_ended, (timings, wall_started)


def test_a_record_lists_runner_tries_only_when_the_runner_made_some(tmp_path):
    """The inline runner makes one try and reports none; a Ray step's record lists its tries with
    their causes (runner/test_ray_cluster.py::test_killed_worker_is_retried_and_attempts_recorded)."""
    assert executor.run([ExecutorStep("nap", nap, Nap(this_output_path(), 0.0))], prefix=str(tmp_path),
                        runner="inline").ok
    [record] = tmp_path.glob("nap-*/.executor/record.json")
    assert "attempts" not in json.loads(record.read_text())["extra"]


@dataclass(frozen=True)
class After:
    output_path: Any
    upstream: Any


def never_runs(config: After) -> dict:
    raise AssertionError("a step blocked by a failure ran")


def test_a_run_ends_on_the_pass_its_last_steps_end_without_idling(tmp_path, monkeypatch):
    """A failure blocks its dependent on the next pass, which leaves nothing to wait on: the run
    returns then. The loop idles a poll interval only while no step of its own runs and some step
    is left to wait on (here, none ever: the one step runs until it fails)."""
    idled: list[float] = []
    monkeypatch.setattr(execute, "time", SimpleNamespace(sleep=lambda s: (idled.append(s), time.sleep(s))))
    fails = ExecutorStep("fails", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1))
    blocked = ExecutorStep("blocked", never_runs, After(this_output_path(), output_path_of(fails)))
    result = executor.run([blocked], prefix=str(tmp_path / "prefix"), runner="inline")
    assert statuses(result) == {"fails": Outcome.FAILED, "blocked": Outcome.BLOCKED}
    assert idled == [], f"the loop idled {idled} with nothing left to wait on"


def test_a_start_says_takeover_only_when_it_took_over_another_runners_lease(tmp_path):
    """A new step, a retried failure and a forced re-run start once each, under leases this run
    took over nothing for: their StepStarted says takeover=False (a real takeover saying True:
    leases/test_record_fencing.py). A second start of a step in one run fails the run at once (a
    loop that kept losing and retaking its own leases would otherwise never end)."""
    prefix = str(tmp_path / "prefix")
    steps = [ExecutorStep("flaky", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1)),
             ExecutorStep("nap", nap, Nap(this_output_path(), 0.0))]

    def starts(**options) -> list[tuple[str, int, bool]]:
        seen: list[StepStarted] = []

        def once(event) -> None:
            if isinstance(event, StepStarted):
                assert event.name not in {s.name for s in seen}, f"{event.name} started twice in one run"
                seen.append(event)

        result = executor.run(steps, prefix=prefix, runner="inline", subscribers=[once], **options)
        assert result.runner_error is None, result.runner_error
        return sorted((e.name, e.attempt, e.takeover) for e in seen)

    assert starts() == [("flaky", 1, False), ("nap", 1, False)]  # new; flaky fails
    assert starts() == [("flaky", 2, False)]  # the failure retried
    assert starts(force_run="^nap$") == [("nap", 2, False)]  # forced


class Color(enum.Enum):
    RED = 1


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclass(frozen=True)
class Inner:
    share: float


@dataclass(frozen=True)
class Recorded:
    output_path: Any
    share: float = 0.5
    limit: float = math.inf
    nothing: Any = None
    flag: bool = True
    count: int = 3
    color: Color = Color.RED
    mode: Mode = Mode.FAST
    where: PurePosixPath = PurePosixPath("/data/in")
    table: dict = field(default_factory=lambda: {"k": 2.5, "inner": Inner(0.125)})
    items: tuple = (1, "a", 0.75)
    inner: Inner = Inner(0.25)
    token: str = secret("hunter2")


def test_a_record_holds_the_resolved_config_as_json_without_its_secrets(tmp_path):
    """The record's config is the config the step ran with: the real output path, floats as JSON
    numbers (non-finite ones as proto3-JSON strings), an Enum by its name, a str or int subclass
    (a StrEnum) by its value, other leaves (a path) as text, dataclasses and dicts as objects,
    tuples as lists; a secret field is left out."""
    assert executor.run([ExecutorStep("recorded", nap_recorded, Recorded(this_output_path()))], prefix=str(tmp_path),
                        runner="inline").ok
    [record] = tmp_path.glob("recorded-*/.executor/record.json")
    assert json.loads(record.read_text())["config"] == {
        "output_path": str(record.parent.parent), "share": 0.5, "limit": "Infinity", "nothing": None, "flag": True,
        "count": 3, "color": "RED", "mode": "fast", "where": "/data/in", "table": {"k": 2.5, "inner": {"share": 0.125}},
        "items": [1, "a", 0.75], "inner": {"share": 0.25}}


def nap_recorded(config: Recorded) -> dict:
    return {}


@dataclass(frozen=True)
class Loud:
    output_path: Any
    words: int


def fail_loudly(config: Loud) -> dict:
    raise ValueError(" ".join(f"word{i}" for i in range(config.words)))


def test_a_failure_stores_the_last_2000_characters_of_its_traceback(tmp_path):
    """A long traceback (here about 3,000 characters: the runner keeps 4,000) is cut from the front:
    the status keeps its end, where the error is."""
    result = executor.run([ExecutorStep("loud", fail_loudly, Loud(this_output_path(), 300))], prefix=str(tmp_path),
                          runner="inline")
    [report] = result.steps
    assert report.status == Outcome.FAILED and len(report.error) > 2000, report
    [status] = tmp_path.glob("loud-*/.executor/status.json")
    tail = json.loads(status.read_text())["traceback_tail"]
    assert len(tail) == 2000 and tail.rstrip().endswith("word298 word299"), tail[-200:]


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


class RefusesAnEnd(RefusesSuccess):
    """A store that refuses (permanently) to write any end of one step: SUCCESS and FAILED alike."""

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        if key.startswith(f"{self.step}-") and json.loads(data)["state"] != "RUNNING":
            raise StoreError(f"scripted: {key} cannot be written")
        return self.inner.replace_if_generation(key, data, generation)


def test_a_failure_the_store_cannot_record_is_warned_of_and_the_run_goes_on(tmp_path, monkeypatch):
    """The commit fails, then so does the FAILED status: the step fails here with the commit's
    error, a warning says its failure is not recorded (its lease goes stale after the TTL), and
    the other step still runs: not an error of the runner."""
    open_raw = location.open_raw_store
    monkeypatch.setattr(location, "open_raw_store", lambda prefix, options=None: RefusesAnEnd(
        open_raw(prefix, options), "refused"))
    lines: list = []
    steps = [ExecutorStep("refused", nap, Nap(this_output_path(), 0.0)),
             ExecutorStep("fine", nap, Nap(this_output_path(), 0.5))]
    result = executor.run(steps, prefix=str(tmp_path), runner="inline", max_concurrent=1,
                          subscribers=[lambda e: lines.append(e) if isinstance(e, LogLine) else None])
    assert result.runner_error is None
    assert statuses(result) == {"refused": Outcome.FAILED, "fine": Outcome.SUCCEEDED}
    assert result.step("refused").error.startswith("could not commit: StoreError: scripted:")
    warned = [line.text for line in lines if line.level == "warning" and "could not record" in line.text]
    assert len(warned) == 1 and warned[0].startswith("refused: could not record the failure: "), lines
    [status] = tmp_path.glob("refused-*/.executor/status.json")
    assert json.loads(status.read_text())["state"] == "RUNNING"  # not released: it goes stale


class Cancels:
    """A step's handle that notes each cancel and the step's stored state at that moment; the
    first one raises when `refuse_first` (a runner whose cancel path crashes, as Ray's can)."""

    def __init__(self, inner, seen: list[tuple[str, str]], refuse_first: bool):
        self.inner, self.seen, self.refuse_first = inner, seen, refuse_first

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cancel(self) -> None:
        [status] = Path(self.inner.call.output_path).glob(".executor/status.json")
        self.seen.append((Path(self.inner.call.output_path).name.split("-")[0], json.loads(status.read_text())["state"]))
        if self.refuse_first and len(self.seen) == 1:
            raise RuntimeError("scripted: cancel crashed")
        self.inner.cancel()


class WaitBreaks:
    """The inline runner, but its wait raises `error` (as a Ray runner that lost its cluster
    would, or as Ctrl-C lands while the loop waits); its handles note their cancels in `cancels`."""

    def __init__(self, inner, error: BaseException, refuse_first_cancel: bool = False):
        self.inner, self.error, self.refuse_first_cancel = inner, error, refuse_first_cancel
        self.cancels: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def submit(self, call) -> Cancels:
        return Cancels(self.inner.submit(call), self.cancels, self.refuse_first_cancel)

    def wait(self, handles, timeout: float) -> list:
        raise self.error


def breaking_runner(monkeypatch, error: BaseException, refuse_first_cancel: bool = False) -> list[WaitBreaks]:
    """Every runner the run makes is a WaitBreaks (listed, to read their cancels)."""
    made: list[WaitBreaks] = []
    new_runner = factory.new_runner

    def make(*args, **kwargs) -> WaitBreaks:
        made.append(WaitBreaks(new_runner(*args, **kwargs), error, refuse_first_cancel))
        return made[-1]

    monkeypatch.setattr(factory, "new_runner", make)
    return made


def stored(prefix: Path, name: str) -> dict | None:
    found = list(prefix.glob(f"{name}-*/.executor/status.json"))
    return json.loads(found[0].read_text()) if found else None


def two_running_one_waiting() -> list[ExecutorStep]:
    """Started in declaration order under max_concurrent=2: `one` and `two` run, `later` waits."""
    return [ExecutorStep("one", nap, Nap(this_output_path(), 60.0)), ExecutorStep("two", nap, Nap(this_output_path(), 60.0)),
            ExecutorStep("later", nap, Nap(this_output_path(), 0.0))]


def test_an_error_of_the_runner_itself_fails_the_running_steps_and_releases_their_leases(tmp_path, monkeypatch):
    """The loop does not crash out leaving a lease RUNNING: each running step ends FAILED with the
    reason (cut at 500 characters; in the result and in its status, written before its task is
    cancelled), each task is cancelled even when cancelling one crashes, the step the run never
    reached stays pending, one already done stays done, the result carries the whole error (exit
    code 1) and a warning says the runner itself broke."""
    done = ExecutorStep("done", nap, Nap(this_output_path(), 0.0))
    assert executor.run([done], prefix=str(tmp_path), runner="inline").ok
    error = "RuntimeError: scripted: the runner lost its cluster" + " (details)" * 60
    made = breaking_runner(monkeypatch, RuntimeError(error.split(": ", 1)[1]), refuse_first_cancel=True)
    seen: list[Any] = []
    started = time.monotonic()
    result = executor.run([done, *two_running_one_waiting()], prefix=str(tmp_path), runner="inline",
                          max_concurrent=2, subscribers=[seen.append])
    took = time.monotonic() - started
    assert result.runner_error == error and result.exit_code == 1 and not result.interrupted
    assert LogLine("warning", f"the run stopped on an error of the runner itself: {error}") in seen, seen
    assert statuses(result) == {"done": Outcome.SUCCEEDED, "one": Outcome.FAILED, "two": Outcome.FAILED,
                                "later": Outcome.PENDING}
    reason = f"runner error: {error}"[:500]
    assert len(reason) == 500 and {s.error for s in result.steps if s.name in ("one", "two")} == {reason}
    assert stored(tmp_path, "done")["state"] == "SUCCESS"
    assert stored(tmp_path, "one")["state"] == stored(tmp_path, "two")["state"] == "FAILED"
    assert stored(tmp_path, "one")["error"] == stored(tmp_path, "two")["error"] == reason
    assert stored(tmp_path, "later") is None
    [runner] = made
    assert runner.cancels == [("one", "FAILED"), ("two", "FAILED")], runner.cancels
    assert took < 30, f"the run took {took:.1f}s: the running steps were not stopped"


@pytest.mark.parametrize("signal_error, reason, exit_code", [
    (KeyboardInterrupt(), "interrupted (Ctrl-C)", 130),
    (signals.Interrupted(signal.SIGTERM), "terminated (SIGTERM)", 143)])
def test_an_interrupt_fails_the_running_steps_with_its_reason_and_releases_their_leases(
        tmp_path, monkeypatch, signal_error, reason, exit_code):
    """Ctrl-C or SIGTERM while the loop waits: the run returns interrupted (exit code 128 + the
    signal), each running step FAILED with the signal's reason, stored before its task is cancelled."""
    made = breaking_runner(monkeypatch, signal_error)
    try:
        result = executor.run(two_running_one_waiting(), prefix=str(tmp_path), runner="inline", max_concurrent=2)
    except KeyboardInterrupt as e:  # failed here: escaping, it would stop pytest itself
        pytest.fail(f"the interrupt escaped the run: {e!r}")
    assert result.interrupted and result.exit_code == exit_code and result.runner_error is None
    assert statuses(result) == {"one": Outcome.FAILED, "two": Outcome.FAILED, "later": Outcome.PENDING}
    assert {s.error for s in result.steps if s.name != "later"} == {reason}
    assert stored(tmp_path, "one")["error"] == stored(tmp_path, "two")["error"] == reason
    [runner] = made
    assert runner.cancels == [("one", "FAILED"), ("two", "FAILED")], runner.cancels


def test_an_exit_raised_in_the_loop_propagates_after_the_leases_are_released(tmp_path, monkeypatch):
    """SystemExit (and the like) is not swallowed, but no lease is left RUNNING behind it."""
    breaking_runner(monkeypatch, SystemExit(3))
    with pytest.raises(SystemExit):
        executor.run(two_running_one_waiting(), prefix=str(tmp_path), runner="inline", max_concurrent=2)
    for name in ("one", "two"):
        assert stored(tmp_path, name)["state"] == "FAILED", name
        assert stored(tmp_path, name)["error"] == "the run stopped: SystemExit: 3"


def test_a_record_that_cannot_be_written_fails_that_step_not_the_run(tmp_path, monkeypatch):
    """Storage refusing one step's record.json: that step FAILED ("could not write the record: ..."),
    its status says so, the other step succeeds and the run itself did not break."""
    write_json = outputs.write_json

    def refusing(fs, path: str, data: bytes) -> None:
        if "/refused-" in path and path.endswith("/.executor/record.json"):
            raise OSError("scripted: no space left for the record")
        write_json(fs, path, data)

    monkeypatch.setattr(outputs, "write_json", refusing)
    steps = [ExecutorStep("refused", nap, Nap(this_output_path(), 0.0)), ExecutorStep("fine", nap, Nap(this_output_path(), 0.0))]
    result = executor.run(steps, prefix=str(tmp_path), runner="inline", max_concurrent=1)
    assert result.runner_error is None
    assert statuses(result) == {"refused": Outcome.FAILED, "fine": Outcome.SUCCEEDED}
    [refused] = [s for s in result.steps if s.name == "refused"]
    assert refused.error == "could not write the record: OSError: scripted: no space left for the record", refused
    assert stored(tmp_path, "refused")["state"] == "FAILED"


@dataclass(frozen=True)
class Logged:
    output_path: Any
    log: str
    name: str
    together: int = 1  # how many starts it waits to see in the log (its own too) before it ends, 30 s at most


def log_start_and_end(config: Logged) -> dict:
    with open(config.log, "a") as f:
        f.write(f"start {config.name}\n")
    time.sleep(0.2)  # several of the loop's passes (it polls every 0.05 s in these tests)
    waited_since = time.monotonic()  # not a guess at how fast the others start on a loaded machine
    while Path(config.log).read_text().count("start") < config.together and time.monotonic() - waited_since < 30:
        time.sleep(0.05)
    with open(config.log, "a") as f:
        f.write(f"end {config.name}\n")
    return {}


def test_max_concurrent_steps_run_at_once_and_no_more(tmp_path, monkeypatch):
    run_context_with(monkeypatch, poll_s=0.05)  # the loop passes several times while a step runs
    log = tmp_path / "log"
    steps = [ExecutorStep(name, log_start_and_end, Logged(this_output_path(), str(log), name)) for name in "abc"]
    assert executor.run(steps, prefix=str(tmp_path / "one"), runner="inline", max_concurrent=1).ok
    lines = log.read_text().split("\n")[:-1]
    assert [line.split()[0] for line in lines] == ["start", "end"] * 3, lines  # one at a time
    log.unlink()
    steps = [ExecutorStep(name, log_start_and_end, Logged(this_output_path(), str(log), name, together=3))
             for name in "abc"]  # each ends only once all three have started: under the limit, they all start
    assert executor.run(steps, prefix=str(tmp_path / "three"), runner="inline", max_concurrent=3).ok
    assert [line.split()[0] for line in log.read_text().split("\n")[:-1]] == ["start"] * 3 + ["end"] * 3


def test_a_max_concurrent_above_256_limits_as_any_other(tmp_path):
    """The count of running steps is compared by value, also past the ints CPython keeps one copy
    of (up to 256): of 258 quick steps under max_concurrent=257, the last starts only after one
    has ended (memory://, so each step is a thread, not a process)."""
    seen: list = []
    steps = [ExecutorStep(f"many/s{i}", nap, Nap(this_output_path(), 0.0)) for i in range(258)]
    result = executor.run(steps, prefix=f"memory://run-loop-{tmp_path.name}", runner="inline", max_concurrent=257,
                          subscribers=[lambda e: seen.append(type(e)) if isinstance(e, (StepStarted, StepFinished)) else None])
    assert result.ok
    assert seen[:seen.index(StepFinished)].count(StepStarted) == 257


@dataclass(frozen=True)
class Reads:
    output_path: Any
    first: Any
    second: Any


def test_a_blocked_step_names_the_dependency_that_failed_not_the_first_it_reads(tmp_path):
    fine = ExecutorStep("fine", nap, Nap(this_output_path(), 0.0))
    broken = ExecutorStep("broken", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1))
    reader = ExecutorStep("reader", nap, Reads(this_output_path(), output_path_of(fine), output_path_of(broken)))
    result = executor.run([fine, broken, reader], prefix=str(tmp_path / "prefix"), runner="inline")
    assert statuses(result) == {"fine": Outcome.SUCCEEDED, "broken": Outcome.FAILED, "reader": Outcome.BLOCKED}
    assert result.step("reader").error == "dependency broken failed"
    for rerun in ({}, {"force_run": "fine"}):  # with nothing to run at all, and with fine run again beside them
        again = executor.run([fine, broken, reader], prefix=str(tmp_path / "prefix"), runner="inline",
                             force_failed=False, **rerun)
        assert statuses(again) == statuses(result)  # broken's failure is kept: reader is blocked at plan time
        assert again.step("reader").error == "dependency broken failed", rerun  # in the same words
        assert again.step("broken").error.startswith("failed: ValueError: call 1 fails on purpose"), rerun


def test_an_adopted_step_forced_to_re_run_but_blocked_reports_the_path_its_plan_gave(tmp_path):
    """A forced re-run of an adopted step (its SUCCESS an alias of another output) that its failed
    dependency then blocks never writes: its report names its own output path, as the plan did, not
    the alias's (only a step the run leaves as it was adopted, skipped, reports the alias)."""
    fine = ExecutorStep("fine", nap, Nap(this_output_path(), 0.0))
    broken = ExecutorStep("broken", fail_then_succeed, Flaky(this_output_path(), str(tmp_path / "calls"), failures=1))
    reader = ExecutorStep("reader", nap, Reads(this_output_path(), output_path_of(fine), output_path_of(broken)))
    prefix = tmp_path / "prefix"
    assert statuses(executor.run([fine, broken, reader], prefix=str(prefix), runner="inline"))["reader"] == "blocked"
    row = executor.plan([reader], prefix=str(prefix)).step("reader")
    adopted = Status(State.SUCCESS, row.digest, row.step_id, 1, 1, None, time.time(),
                     alias_of={"step_id": "reader-0ld", "output_rel": "reader-0ld", "reason": "same output",
                               "declared_by": "t@h"})
    assert LocalStore(str(prefix)).create_if_absent(status_key(row.step_id), adopted.to_bytes()) is not None
    assert executor.plan([reader], prefix=str(prefix)).step("reader").output_path == str(prefix / "reader-0ld")
    options = dict(prefix=str(prefix), runner="inline", force_failed=False, force_run="^(fine|reader)$")
    planned = executor.plan([fine, broken, reader], **options).step("reader")
    result = executor.run([fine, broken, reader], **options)  # fine runs again beside: the run loop is used
    assert statuses(result) == {"fine": Outcome.SUCCEEDED, "broken": Outcome.FAILED, "reader": Outcome.BLOCKED}
    assert planned.decision == "run" and planned.output_path == row.output_path, planned
    assert result.step("reader").output_path == row.output_path, result.step("reader")


def test_a_step_run_alone_reads_its_dependency_at_that_dependency_s_own_output(tmp_path):
    """--only the reader of a nonblocking dependency (not pulled in by --only): the dependency is not
    tracked by the run, and the reader's config still names the dependency's output path."""
    fine = ExecutorStep("fine", nap, Nap(this_output_path(), 0.0))
    reader = ExecutorStep("reader", record_config, Reads(this_output_path(), output_path_of(fine).nonblocking(), None))
    prefix = tmp_path / "prefix"
    assert executor.run([fine, reader], prefix=str(prefix), runner="inline").ok
    again = executor.run([fine, reader], prefix=str(prefix), runner="inline", only="reader", force_run="reader")
    assert again.ok and [s.name for s in again.steps] == ["reader"], again.steps
    [fine_output] = prefix.glob("fine-*")
    [record] = prefix.glob("reader-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"first": str(fine_output)}


def record_config(config: Reads) -> dict:
    return {"first": config.first}
