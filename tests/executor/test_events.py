"""The library reports through events and prints nothing; the command line subscribes its console
view; one vocabulary for a step's state, mapped in one place (issue 29, items 2 and 3)."""

from __future__ import annotations

import collections.abc
import gc
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import executor
from executor import ExecutorStep, output_path_of, this_output_path
from executor.core.outcome import Ending, Outcome, ending, outcome_of_action, outcome_of_state
from executor.core.plan import Action
from executor.core.record import Absent, State
from executor.engine.events import (LeaseLost, LogLine, PlanMade, RunFinished, RunStarted, StepFinished, StepRetried,
                                    StepStarted, StepWaiting)

EXECUTOR = Path(__file__).resolve().parents[2] / "executor"


@dataclass(frozen=True)
class Work:
    output_path: Any
    fail: bool = False
    after: Any = None  # a dependency's output path


def work(config: Work) -> dict:
    if config.fail:
        raise ValueError("failing on purpose")
    return {"n": 1}


@dataclass(frozen=True)
class Rendezvous:
    """Writes `write` as it starts, then waits (up to two minutes) for `wait_for` to exist."""

    output_path: Any
    write: str
    wait_for: str


def rendezvous(config: Rendezvous) -> dict:
    import time

    Path(config.write).write_text("started")
    deadline = time.time() + 120
    while not Path(config.wait_for).exists():
        if time.time() > deadline:
            raise TimeoutError(f"{config.wait_for} never appeared")
        time.sleep(0.1)
    return {"waited_for": config.wait_for}


def dag() -> list[ExecutorStep]:
    """A success, a failure, the failure's blocked dependent and the success's succeeding one."""
    ok = ExecutorStep("events/ok", work, Work(this_output_path()))
    bad = ExecutorStep("events/bad", work, Work(this_output_path(), fail=True))
    return [ExecutorStep("events/after-ok", work, Work(this_output_path(), after=output_path_of(ok))),
            ExecutorStep("events/after-bad", work, Work(this_output_path(), after=output_path_of(bad)))]


def test_a_run_emits_its_plan_each_steps_start_and_end_and_its_result_in_order(tmp_path):
    seen: list[Any] = []
    result = executor.run(dag(), prefix=str(tmp_path), runner="inline", max_concurrent=1, subscribers=[seen.append])

    assert isinstance(seen[0], PlanMade) and seen[0].prefix == str(tmp_path)
    assert {d.node.name: d.action for d in seen[0].plan.decisions.values()} == {
        "events/ok": Action.RUN, "events/bad": Action.RUN, "events/after-ok": Action.RUN, "events/after-bad": Action.RUN}
    assert isinstance(seen[1], RunStarted) and seen[1].run_id == result.run_id and seen[1].run_file == result.run_file
    assert isinstance(seen[-1], RunFinished) and seen[-1].result is result and seen[-1].seconds > 0
    steps = seen[2:-1]
    assert all(isinstance(e, (StepStarted, StepFinished)) for e in steps), steps  # no waits, retries, notes
    by_step: dict[str, list[tuple]] = {}
    for e in steps:
        by_step.setdefault(e.name, []).append(
            ("started", e.attempt, e.takeover) if isinstance(e, StepStarted) else
            ("finished", e.outcome, e.error, e.dependency, e.elsewhere))
    assert by_step == {
        "events/ok": [("started", 1, False), ("finished", Outcome.SUCCEEDED, None, None, False)],
        "events/bad": [("started", 1, False), ("finished", Outcome.FAILED, by_step["events/bad"][1][2], None, False)],
        "events/after-ok": [("started", 1, False), ("finished", Outcome.SUCCEEDED, None, None, False)],
        "events/after-bad": [("finished", Outcome.BLOCKED, "dependency events/bad failed", "events/bad", False)]}
    assert "ValueError: failing on purpose" in by_step["events/bad"][1][2]
    names = [(type(e).__name__, e.name) for e in steps]
    assert names.index(("StepFinished", "events/after-bad")) > names.index(("StepFinished", "events/bad"))
    assert names.index(("StepStarted", "events/after-ok")) > names.index(("StepFinished", "events/ok"))
    ok_end = next(e for e in steps if isinstance(e, StepFinished) and e.name == "events/ok")
    assert ok_end.result == {"n": 1} and ok_end.seconds >= 0
    started = next(e for e in steps if isinstance(e, StepStarted) and e.name == "events/ok")
    assert started.output_path == result.output_path("events/ok")
    # the events agree with the result, in the one vocabulary
    assert {s.name: s.status for s in result.steps} == {
        "events/ok": Outcome.SUCCEEDED, "events/bad": Outcome.FAILED, "events/after-ok": Outcome.SUCCEEDED,
        "events/after-bad": Outcome.BLOCKED}

    again: list[Any] = []  # nothing can run (failures left as they are): the plan, then the result
    left = executor.run(dag(), prefix=str(tmp_path), runner="inline", force_failed=False, subscribers=[again.append])
    assert [type(e) for e in again] == [PlanMade, RunFinished] and again[1].result is left
    assert {s.name: s.status for s in left.steps}["events/bad"] == Outcome.FAILED


def fail_once(config: Work) -> dict:
    tried = Path(config.output_path, "tried")
    if not tried.exists():
        tried.write_text("x")
        raise ValueError("first try fails")
    return {"n": 2}


def test_a_retried_step_emits_its_retry_between_start_and_end(tmp_path):
    from executor import Resources

    step = ExecutorStep("events/flaky", fail_once, Work(this_output_path()), resources=Resources(retry_user_errors=1))
    seen: list[Any] = []
    assert executor.run([step], prefix=str(tmp_path), runner="inline", subscribers=[seen.append]).ok
    middle = [(type(e).__name__, getattr(e, "outcome", None)) for e in seen[2:-1]]
    assert middle == [("StepStarted", None), ("StepRetried", None), ("StepFinished", Outcome.SUCCEEDED)]
    assert "ValueError: first try fails" in seen[3].error and seen[4].result == {"n": 2}


def test_a_run_file_that_cannot_be_written_stops_the_run_and_its_runner(tmp_path, monkeypatch):
    """Before any step starts: the run raises, its runner is shut down (a Ray it started would
    otherwise stay up), and subscribers hear RunFinished without a result."""
    from executor.engine.runner.inline import InlineRunner

    shut: list[bool] = []
    monkeypatch.setattr(InlineRunner, "shutdown", lambda self: shut.append(True))
    (tmp_path / "runs").write_text("a file where the run files' directory goes")
    seen: list[Any] = []
    with pytest.raises(Exception):
        executor.run(dag(), prefix=str(tmp_path), runner="inline", subscribers=[seen.append])
    assert shut and [type(e) for e in seen] == [PlanMade, RunFinished] and seen[-1].result is None
    assert not list(tmp_path.glob("events/*/.executor/status.json"))  # nothing ran


def test_plan_emits_the_plan_it_returns(tmp_path):
    seen: list[Any] = []
    planned = executor.plan(dag(), prefix=str(tmp_path), subscribers=[seen.append])
    assert [type(e) for e in seen] == [PlanMade] and seen[0].plan is planned.plan


def test_the_library_prints_nothing(tmp_path, capfd):
    """Called from Python with no subscriber: a failed run, a materialize and a plan print nothing,
    on either stream, at the file-descriptor level."""
    capfd.readouterr()
    result = executor.run(dag(), prefix=str(tmp_path), runner="inline")
    assert not result.ok
    ok = ExecutorStep("events/ok", work, Work(this_output_path()))
    executor.materialize(ok, prefix=str(tmp_path / "m"), runner="inline")
    executor.plan(dag(), prefix=str(tmp_path))
    executor.run(dag(), prefix=str(tmp_path), runner="inline", force_failed=False)  # nothing to run
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_the_command_line_prints_the_plan_progress_and_summary(tmp_path, capsys):
    from executor.cli import run

    assert run(dag(), argv=["--prefix", str(tmp_path), "--runner", "inline"], environ={}, main_file=__file__) == 1
    out = capsys.readouterr().out
    assert f"prefix: {tmp_path}" in out
    assert "events/after-bad" in out.split("outputs under")[0]  # the plan table
    assert "✔ events/ok" in out and "✘ events/bad failed:" in out and "⊘ events/after-bad blocked" in out
    assert "progress: " in out  # the live view, piped
    table = out[out.index("this run"):]
    assert "ran" in table and "blocked" in table and "failing on purpose" in table
    assert re.search(r"2/4 step\(s\) succeeded, 3 ran here; run record: .*runs/test_events-.*\.json; report: ", out)
    assert "failed or blocked:" in out

    assert run(dag(), argv=["--prefix", str(tmp_path), "--runner", "inline", "--force-failed", "false"],
               environ={}, main_file=__file__) == 1
    assert "2 step(s) failed or blocked: events/bad, events/after-bad" in capsys.readouterr().out


def test_the_console_view_hears_every_kind_of_event():
    """Every event type reaches a Reporter method (a subscriber that dropped one would lose a line)."""
    from executor.tools.console_view import _HANDLERS
    from executor.engine.events import Event

    assert set(_HANDLERS) == set(Event.__args__) - {RunStarted}  # RunStarted: the run file's, shown at the end
    assert {LeaseLost, StepRetried, StepWaiting, LogLine} <= set(_HANDLERS)


def test_the_library_leaves_the_garbage_collector_alone(tmp_path, monkeypatch):
    """A notebook's collector: never frozen by a run, left disabled or enabled as the caller had it."""
    def refuse() -> None:
        raise AssertionError("the library froze or unfroze the collector")

    monkeypatch.setattr(gc, "freeze", refuse)
    monkeypatch.setattr(gc, "unfreeze", refuse)
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    executor.run(dag(), prefix=str(tmp_path), runner="inline")
    # Not "==": objects an earlier command-line run in this process froze may be freed meanwhile
    # (the count then drops); it never grows unless something froze the collector.
    assert gc.isenabled() and gc.get_freeze_count() <= frozen
    gc.disable()
    try:
        executor.run(dag(), prefix=str(tmp_path / "b"), runner="inline")
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Watched(collections.abc.MutableMapping):
    """os.environ, remembering which names were read."""

    def __init__(self, inner):
        self.inner, self.read = inner, set()

    def __getitem__(self, key):
        self.read.add(key)
        return self.inner[key]

    def __setitem__(self, key, value):
        self.inner[key] = value

    def __delitem__(self, key):
        del self.inner[key]

    def __iter__(self):
        return iter(self.inner)

    def __len__(self):
        return len(self.inner)

    def copy(self):
        return dict(self.inner)


def test_a_run_given_environ_reads_no_setting_from_the_process_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTOR_PREFIX", str(tmp_path / "not-this-one"))
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", "not json")  # read, it would fail the run
    watched = _Watched(os.environ)
    monkeypatch.setattr(os, "environ", watched)
    result = executor.run(dag(), runner="inline", environ={"EXECUTOR_PREFIX": str(tmp_path / "this-one")})
    assert result.prefix == str(tmp_path / "this-one") and not (tmp_path / "not-this-one").exists()
    # (str keys: git, run for the run's provenance, looks up b"PATH" as every subprocess does)
    assert not {k for k in watched.read if isinstance(k, str) and k.startswith(("EXECUTOR_", "RAY_"))}, watched.read


def test_a_ray_run_takes_its_cluster_address_from_environ(tmp_path, monkeypatch):
    """RAY_ADDRESS from `environ=`, not os.environ: the run tries the address it was given (nothing
    listens there: a usage error naming it, in seconds) and never reads the process's."""
    from executor.core.errors import ExecutorError
    from executor.engine.runner.ray_env import free_ports

    import ray  # noqa: F401 - Ray's own module reads its variables as it loads: not the run's reads

    given, other = (f"127.0.0.1:{port}" for port in free_ports(2))
    monkeypatch.setenv("RAY_ADDRESS", other)
    watched = _Watched(os.environ)
    monkeypatch.setattr(os, "environ", watched)
    with pytest.raises(ExecutorError, match=f"could not reach the Ray cluster at '{given}'"):
        executor.run(dag(), prefix=str(tmp_path), runner="ray", environ={"RAY_ADDRESS": given})
    assert "RAY_ADDRESS" not in watched.read and not {k for k in watched.read if k.startswith("EXECUTOR_")}


def test_one_mapping_between_the_vocabularies():
    assert {a: outcome_of_action(a) for a in Action} == {
        Action.RUN: Outcome.PENDING, Action.WAIT: Outcome.PENDING, Action.SKIP: Outcome.SUCCEEDED,
        Action.BLOCKED: Outcome.BLOCKED, Action.STOP: Outcome.FAILED, Action.COPY: Outcome.PENDING}
    assert {s: outcome_of_state(s) for s in State} == {
        State.SUCCESS: Outcome.SUCCEEDED, State.FAILED: Outcome.FAILED, State.RUNNING: Outcome.WATCHING}
    assert [o for o in Outcome if o.ended] == [Outcome.SUCCEEDED, Outcome.FAILED, Outcome.BLOCKED]
    assert [o for o in Outcome if o.unsuccessful] == [Outcome.FAILED, Outcome.BLOCKED]
    assert ending(Outcome.SUCCEEDED, Action.RUN, True) == Ending.RAN
    assert ending(Outcome.SUCCEEDED, Action.SKIP, False) == Ending.SKIPPED
    assert ending(Outcome.SUCCEEDED, Action.WAIT, False) == Ending.ELSEWHERE
    assert ending(Outcome.SUCCEEDED, Action.COPY, False) == Ending.COPIED  # copied from a --cache-from prefix
    assert ending(Outcome.SUCCEEDED, Action.COPY, True) == Ending.RAN  # its copy fell back to running here
    assert ending(Outcome.BLOCKED, Action.RUN, False) == Ending.BLOCKED
    assert {ending(o, Action.RUN, False) for o in (Outcome.PENDING, Outcome.RUNNING, Outcome.WATCHING)} == {
        Ending.INTERRUPTED}
    # the stored strings do not change: run files, status.json and --json rows keep their words
    assert [o.value for o in Outcome] == ["pending", "running", "watching", "succeeded", "failed", "blocked"]
    assert f"{Outcome.SUCCEEDED}" == "succeeded" and [s.value for s in State] == ["RUNNING", "SUCCESS", "FAILED"]
    assert [a.value for a in Absent] == ["NO STATUS", "CORRUPT"]


def test_no_module_but_the_vocabulary_maps_actions_or_states_to_outcomes():
    """The action -> outcome mapping was written three times (execute.py, api.py, live.py): now once."""
    mapping = re.compile(r"(Action|State)\.\w+\s*:\s*(Outcome\.\w+|\"(done|succeeded|blocked|failed|waiting)\")")
    found = sorted(str(p.relative_to(EXECUTOR)) for p in EXECUTOR.rglob("*.py") if mapping.search(p.read_text()))
    assert found == ["core/outcome.py"]
    assert not [p for p in EXECUTOR.rglob("*.py") if "NodeState" in p.read_text()]


@pytest.mark.parametrize("event", [LogLine("info", "x"), RunStarted("r", "f")])
def test_events_are_frozen_values(event):
    with pytest.raises(AttributeError):
        event.text = "y"  # type: ignore[misc]


def test_the_run_file_says_a_forced_exit_unless_it_is_final(tmp_path):
    """A second signal ends the process early: the run file written so far gains the exit code and
    `forced_exit`; a run file already final is left as it is (engine/run/run_file.py)."""
    import json

    from executor.engine.events import Events
    from executor.engine.run.run_file import RunFile

    planned = executor.plan(dag(), prefix=str(tmp_path))
    run_file = RunFile.begin(planned, "20260101T000000Z-abcdef", "exp", "why", None, {"host": "h"}, Events())
    first = json.loads(Path(run_file.path).read_text())
    assert run_file.path == f"{tmp_path}/runs/exp-20260101T000000Z-abcdef.json"
    assert [s["status"] for s in first["steps"]] == [None] * 4 and "exit_code" not in first
    assert [p["action"] for p in first["plan"]] == ["run"] * 4
    run_file.forced(130)
    forced = json.loads(Path(run_file.path).read_text())
    assert forced["exit_code"] == 130 and forced["forced_exit"] is True and "finished_at" in forced

    result = executor.run(dag(), prefix=str(tmp_path / "done"), runner="inline")
    final = RunFile.begin(executor.plan(dag(), prefix=str(tmp_path / "done")), "r", "exp", None, None, {}, Events())
    final.finish(result)
    written = Path(final.path).read_text()
    final.forced(143)
    assert Path(final.path).read_text() == written and json.loads(written)["exit_code"] == 1
    assert json.loads(written)["outcome"] == {s.step_id: s.status.value for s in result.steps}


def test_a_forced_exit_while_the_final_run_file_is_being_written_still_leaves_its_exit_code(tmp_path):
    """The first Ctrl-C ends the run and its final run file is being written when the second one
    comes: the process exits as soon as the forced write is done, so the final write may never land.
    The forced write must not stand aside for it (CI once found a run file without exit_code)."""
    import json
    import threading

    from fsspec.implementations.local import LocalFileSystem

    from executor.engine.events import Events
    from executor.engine.run.run_file import RunFile

    class StallingFinalWrite(LocalFileSystem):
        """The main thread's write of the final version starts and never ends (the process is gone)."""
        stalled, release, main = threading.Event(), threading.Event(), threading.main_thread()

        def pipe_file(self, path, value, **kwargs):
            if threading.current_thread() is not self.main and b'"timeline"' in value:
                self.stalled.set()
                self.release.wait(30)
            return super().pipe_file(path, value, **kwargs)

    result = executor.run(dag(), prefix=str(tmp_path / "done"), runner="inline")
    planned = executor.plan(dag(), prefix=str(tmp_path / "done"))
    run_file = RunFile.begin(planned, "r", "exp", None, None, {}, Events())
    run_file.fs = StallingFinalWrite()
    finishing = threading.Thread(target=run_file.finish, args=(result,))
    finishing.start()
    try:
        assert StallingFinalWrite.stalled.wait(30)
        run_file.forced(130)  # the watcher's last breath, then os._exit
        written = json.loads(Path(run_file.path).read_text())
        assert written["exit_code"] == 130 and written["forced_exit"] is True
        assert written["outcome"] == {s.step_id: s.status.value for s in result.steps}  # what the run knew
    finally:
        StallingFinalWrite.release.set()
        finishing.join()


def test_threads_writing_one_small_file_at_once_each_move_a_whole_file_into_place(tmp_path):
    """outputs.write_json from two threads of one process (the forced exit's and the run's final run
    file): each writes its own temporary file, so none fails and the file is always one whole version."""
    import json

    from fsspec.implementations.local import LocalFileSystem

    from executor.engine.prefix import outputs

    import itertools

    from tests.cache.at_once import run_at_once

    path, writers = str(tmp_path / "run.json"), itertools.count()

    def write() -> None:
        k = next(writers)
        for i in range(60):
            outputs.write_json(LocalFileSystem(), path, json.dumps({"writer": k, "i": i, "pad": "x" * 4000}).encode())

    run_at_once(6, write)  # a writer's error is raised here
    assert json.loads(Path(path).read_text())["i"] == 59
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left behind
