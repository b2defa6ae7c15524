"""The inline runner's plan-time check: a multi-host step is refused before anything runs.

No Ray here: the inline runner runs each step in one child process, so `Resources(hosts=2)` cannot
be honoured and must be an error (exit 2) naming the step, the field and the fix.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, this_output_path
from executor.cli import run
from executor.engine.runner.base import StepCall
from executor.engine.runner.inline import InlineRunner
from executor.core.step import Resources


@dataclass(frozen=True)
class Touch:
    output_path: str


def touch(config: Touch) -> dict:
    (Path(config.output_path) / "ran").write_text("yes")
    return {}


def experiment(wide_hosts: int) -> list[ExecutorStep]:
    return [ExecutorStep("inline/single", touch, Touch(this_output_path())),
            ExecutorStep("inline/wide", touch, Touch(this_output_path()), resources=Resources(hosts=wide_hosts))]


def run_inline(steps: list[ExecutorStep], prefix: Path) -> int:
    return run(steps, argv=["--prefix", str(prefix), "--runner", "inline"], environ={}, main_file=__file__)


def test_multi_host_step_is_refused_before_anything_runs(tmp_path, capsys):
    assert run_inline(experiment(wide_hosts=2), tmp_path) == 2
    err = capsys.readouterr().err
    assert "inline runner cannot run this plan" in err
    assert "'inline/wide' asks for Resources(hosts=2)" in err and "--runner ray" in err
    assert "'inline/single'" not in err
    assert not list(tmp_path.rglob("status.json")), "nothing may run or be leased"
    assert not list(tmp_path.rglob("ran"))


def test_single_host_steps_still_run_inline(tmp_path):
    assert run_inline(experiment(wide_hosts=1), tmp_path) == 0
    assert len(list(tmp_path.rglob("ran"))) == 2


def test_check_steps_names_only_multi_host_steps():
    runner = InlineRunner(max_workers=1)
    try:
        assert runner.check_steps([("a", Resources()), ("b", Resources(hosts=1))], prefix_is_local=True) == []
        [problem] = runner.check_steps([("a", Resources()), ("b", Resources(hosts=4))], prefix_is_local=False)
        assert problem.startswith("step 'b' asks for Resources(hosts=4)") and "--runner ray" in problem
    finally:
        runner.shutdown()


# -- steps in child processes: cancel kills, a silent runner makes the child stop itself --------
@dataclass(frozen=True)
class Forever:
    output_path: str


def run_forever(config: Forever) -> dict:
    (Path(config.output_path) / "pid").write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


def _pid_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _started(out: Path) -> int:
    deadline = time.monotonic() + 60
    while not (out / "pid").exists() or not (out / "pid").read_text():
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.05)
    return int((out / "pid").read_text())


def test_cancel_kills_the_steps_process(tmp_path):
    runner = InlineRunner(silence_limit_s=30)
    try:
        handle = runner.submit(StepCall("forever", run_forever, Forever(str(tmp_path)), str(tmp_path)))
        pid = _started(tmp_path)
        assert pid != os.getpid()
        handle.cancel()
        assert handle.outcome().error == "cancelled"
        assert _pid_gone(pid)
    finally:
        runner.shutdown()


def test_a_step_stops_itself_when_its_runner_goes_silent(tmp_path):
    """What a SIGSTOPped runner looks like from the child: no pings. The child exits on its own
    (before any other runner could take the lease over), so it cannot write late."""
    runner = InlineRunner(silence_limit_s=1.0)
    try:
        handle = runner.submit(StepCall("forever", run_forever, Forever(str(tmp_path)), str(tmp_path)))
        pid = _started(tmp_path)
        runner._stop.set()  # the pinger stops, as if this process were paused
        outcome = handle.outcome()
        assert not outcome.ok and "stopped itself: it heard nothing from its runner for 1s" in outcome.error
        assert _pid_gone(pid)
    finally:
        runner.shutdown()


# -- two runners in one process ---------------------------------------------------------------
@dataclass(frozen=True)
class Nap:
    seconds: float
    output_path: str


def nap(config: Nap) -> dict:
    time.sleep(config.seconds)
    return {"slept": config.seconds}


def test_another_runners_long_step_never_holds_back_a_short_steps_outcome(tmp_path, monkeypatch):
    """Two runs in one process, each with its runner: a child forked by one inherits every pipe open
    at that moment. B's result pipe, made just before A forked its long step, used to stay open in
    A's child, so B's 0 s step was reported only when A's ended. B is held in fork (its pipes made)
    until A has come to fork too, or to the lock that keeps forks apart: events, not a guessed sleep.
    A's step never ends by itself, so B's outcome comes while it runs or, held back, not at all."""
    import threading

    from executor.engine.runner import inline

    real_fork, main = os.fork, threading.current_thread()
    a_arrived = threading.Event()  # A forks, or waits for the fork lock B holds
    b_in_fork = threading.Event()  # B has made its pipes and is about to fork

    class WatchedLock:
        def __init__(self, inner):
            self.inner = inner

        def acquire(self, *args, **kwargs):
            if threading.current_thread() is main:
                a_arrived.set()
            return self.inner.acquire(*args, **kwargs)

        def release(self):
            self.inner.release()

        def __enter__(self):
            return self.acquire()

        def __exit__(self, *exc):
            self.release()

    def slow_fork():  # B is caught between making its pipes and forking, as the scheduler may catch it
        if threading.current_thread().name == "runner-b":
            b_in_fork.set()
            a_arrived.wait(timeout=30)
            return real_fork()
        if threading.current_thread() is main:
            a_arrived.set()
        return real_fork()

    monkeypatch.setattr(inline._PIPES, "lock", WatchedLock(inline._PIPES.lock))
    monkeypatch.setattr(os, "fork", slow_fork)
    a, b = InlineRunner(start_method="fork"), InlineRunner(start_method="fork")
    finished: dict[str, bool] = {}
    try:
        def run_b() -> None:
            handle = b.submit(StepCall("b", nap, Nap(0.0, str(tmp_path / "b")), str(tmp_path / "b")))
            assert handle.outcome().ok
            finished["b"] = True

        thread = threading.Thread(target=run_b, name="runner-b")
        thread.start()
        assert b_in_fork.wait(timeout=30)  # B has made its pipes and waits in fork for A
        slow = a.submit(StepCall("a", nap, Nap(600.0, str(tmp_path / "a")), str(tmp_path / "a")))
        thread.join(timeout=60)  # a bound only a held-back outcome reaches
        assert finished.get("b"), "B's outcome was held back by A's step (still running)"
        assert not slow.done()  # A's step still runs (shutdown kills it)
    finally:
        a.shutdown()
        b.shutdown()


def run_a_step_inside(config: Nap) -> dict:
    inner = InlineRunner(start_method="fork")
    try:
        handle = inner.submit(StepCall("inner", nap, config, config.output_path))
        return {"inner_ok": handle.outcome().ok}
    finally:
        inner.shutdown()


def test_a_step_can_fork_steps_of_its_own(tmp_path):
    """The forked child holds the pipe lock its parent's thread took to fork: it starts afresh."""
    runner = InlineRunner(start_method="fork")
    try:
        handle = runner.submit(StepCall("outer", run_a_step_inside, Nap(0.0, str(tmp_path)), str(tmp_path)))
        assert runner.wait([handle], timeout=30) == [handle], "the step's own fork hung"
        assert handle.outcome().ok and handle.outcome().result == {"inner_ok": True}
    finally:
        runner.shutdown()


# -- attempt logs: every attempt's output is kept, as on Ray (issue 47) -------------------------
def talk(config: Touch) -> dict:
    import sys

    print("to stdout from the step", flush=True)
    print("to stderr from the step", file=sys.stderr, flush=True)
    os.system("echo from a subprocess of the step")  # noqa: S605 - fd-level output must be kept too
    return {}


def test_each_inline_attempt_writes_its_log_and_still_prints(tmp_path, capfd):
    step = ExecutorStep("inline/talk", talk, Touch(this_output_path()))
    assert run_inline([step], tmp_path) == 0
    [log] = tmp_path.glob("inline/talk-*/.executor/logs/attempt-1.log")
    text = log.read_text()
    assert text.startswith("=== ") and "inline/talk-" in text.splitlines()[0] and "attempt 1" in text
    for line in ("to stdout from the step", "to stderr from the step", "from a subprocess of the step"):
        assert line in text, text
    out, err = capfd.readouterr()
    assert "to stdout from the step" in out and "to stderr from the step" in err
    assert out.count("to stdout from the step") == 1, "the step's own output must not be echoed again"
