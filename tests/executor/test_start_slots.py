"""Two run-loop paths the mutation report had listed as equivalent, which a run can tell (issue 46):

- a step another runner holds is watched, not run here: it takes no `--max-concurrent` slot, so an
  independent step starts at once, not after the holder's lease expires (execute.py `_start_ready`
  counts only the steps it started, `t.state == Outcome.RUNNING`);
- a step whose start fails after its task was submitted (here: a subscriber raising on StepStarted)
  is failed *and* its task cancelled: its process does not keep running and writing into an output
  the run reports failed (execute.py `_fail` cancels a task that is not done).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import executor
from executor import ExecutorStep, this_output_path
from executor.core.outcome import Outcome
from executor.core.record import Owner, State, Status, status_key
from executor.engine.events import StepFinished, StepStarted
from executor.engine.store.local import LocalStore

OTHER = Owner("someone-elses-run", "elsewhere", 4242, "someone")


@dataclass(frozen=True)
class Plain:
    output_path: Any


def write_marker(config: Plain) -> dict:
    Path(config.output_path, "done.txt").write_text("ok")
    return {"ok": True}


def test_a_step_another_runner_holds_takes_no_slot_an_independent_step_starts_at_once(tmp_path):
    """`held` (declared first) is leased by another runner, `free` needs nothing; one slot. The other
    runner commits `held` only once `free` has finished, so a loop that counted the watched step
    as running would hold `free` back until `held`'s lease expired (60 s here) and then take `held`
    over itself: `free` must start and end first, and `held` end done elsewhere, never run here."""
    prefix = str(tmp_path / "prefix")
    held = ExecutorStep("held", write_marker, Plain(this_output_path()))
    free = ExecutorStep("free", write_marker, Plain(this_output_path()))
    [row] = [r for r in executor.plan([held, free], prefix=prefix, environ={}).steps if r.name == "held"]
    store, key = LocalStore(prefix), status_key(row.output_path[len(prefix) + 1:])
    running = Status(State.RUNNING, row.digest, row.step_id, 1, 1, OTHER, time.time(), started_at=time.time())
    assert store.create_if_absent(key, running.to_bytes()) is not None
    seen: list[str] = []

    def note(event) -> None:
        if isinstance(event, (StepStarted, StepFinished)):
            seen.append(f"{type(event).__name__} {event.node.name}")
        if isinstance(event, StepFinished) and event.node.name == "free":  # the other runner commits now
            done = running.next(state=State.SUCCESS, written_at=time.time())
            assert store.replace_if_generation(key, done.to_bytes(), store.read(key).generation) is not None

    result = executor.run([held, free], prefix=prefix, runner="inline", max_concurrent=1, subscribers=[note])
    assert result.ok, result
    assert result.step("free").ran_here and not result.step("held").ran_here, seen
    assert seen[:2] == ["StepStarted free", "StepFinished free"], seen
    assert "StepStarted held" not in seen, seen


@dataclass(frozen=True)
class Busy:
    output_path: Any
    pid_file: str


def write_pid_then_keep_writing(config: Busy) -> dict:
    """Says it runs (its pid), then writes into its output for up to a minute."""
    Path(config.pid_file).write_text(str(os.getpid()))
    for i in range(600):
        Path(config.output_path, "progress.txt").write_text(str(i))
        time.sleep(0.1)
    return {}


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_step_whose_start_fails_after_its_task_was_submitted_is_failed_and_its_process_stopped(tmp_path):
    """A subscriber raising on StepStarted makes the start fail ("could not start"); the step's task
    was already submitted and its process runs (the subscriber waits until it has written its pid).
    When the step is reported failed, that process is being stopped: it does not go on writing into
    the output while the run goes on (checked before the run ends: the run's end stops every child)."""
    pid_file = tmp_path / "pid"
    step = ExecutorStep("busy", write_pid_then_keep_writing, Busy(this_output_path(), str(pid_file)))
    still_running: list[bool] = []

    def refuse_the_start(event) -> None:
        if isinstance(event, StepStarted):
            waited = time.monotonic()
            while not pid_file.exists() and time.monotonic() - waited < 60:
                time.sleep(0.02)
            raise RuntimeError("this subscriber refuses the start")
        if isinstance(event, StepFinished):  # the run still goes on: the kill is asynchronous, wait for it
            pid, waited = int(pid_file.read_text()), time.monotonic()
            while alive(pid) and time.monotonic() - waited < 20:  # a bound only a kept process reaches
                time.sleep(0.05)
            still_running.append(alive(pid))

    result = executor.run([step], prefix=str(tmp_path / "prefix"), runner="inline", subscribers=[refuse_the_start])
    [report] = result.steps
    assert report.status == Outcome.FAILED, report
    assert "could not start: RuntimeError: this subscriber refuses the start" in (report.error or ""), report
    assert still_running == [False], "the failed step's process still ran and wrote into its output"
