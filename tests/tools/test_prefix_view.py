"""The typed read model of a prefix (executor/engine/prefix/prefix_view.py), on a prefix experiments/hello.py
really ran on: a failed step, a step blocked behind it, a running lease, a corrupt status, an
unreadable run file; read through the store protocol alone, so on any backend the same."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from executor.core.outcome import Outcome
from executor.core.record import Absent, Owner, State, Status, status_key
from executor.engine.run.lease import LeaseKeeper, LeaseSettings
from executor.engine.prefix.prefix_view import PrefixView, RunRow, StepRow
from executor.engine.runner.capture import captured_output, log_path
from executor.engine.store import open_store

from .toy import run_main

HELLO = Path(__file__).resolve().parents[2] / "experiments" / "hello.py"
BROKEN = "hello/broken-0123456789ab"


@pytest.fixture(scope="module")
def hello_prefix(tmp_path_factory) -> Path:
    """hello.py with --fail-shout (shout FAILED, summary blocked), then a runner holding summary's
    lease, a corrupt status, a corrupt record and an unreadable run file; attempt logs as a worker writes them (the
    in-process runner writes none). Made once: the tests only read it."""
    prefix = tmp_path_factory.mktemp("hello-prefix")
    code, out = run_main("run", "--prefix", str(prefix), str(HELLO), "--runner", "inline", "--fail-shout")
    assert code == 1, out
    store = open_store(str(prefix))
    summary = _summary_id(prefix)
    keeper = LeaseKeeper(store, LeaseSettings(60, 15))
    running = Status(State.RUNNING, "d" * 64, f"hello/{summary}", 1, 2,
                     Owner("20990101T000000Z-abcdef", "other-host", 4242, "alice"), time.time() - 30,
                     started_at=time.time() - 40)
    assert keeper.acquire(status_key(f"hello/{summary}"), running, None) is not None
    assert store.create_if_absent(status_key(BROKEN), b'{"schema": 1, "state": "RUNN') is not None
    (prefix / "runs" / "hello-19990101T000000Z-000000.json").write_text("{not json")
    next(prefix.glob("hello/greeting-*/.executor/record.json")).write_text('{"schema": 1, "step_id": ')
    for output in prefix.glob("hello/[cs]*-*/.executor/status.json"):
        for attempt in (1, 2) if "shout" in str(output) else (1,):
            with captured_output(log_path(str(output.parent.parent), attempt), f"attempt {attempt}"):
                os.write(1, f"{output.parent.parent.name} says hello from attempt {attempt}\n".encode())
    return prefix


def _summary_id(prefix: Path) -> str:
    """summary never started (blocked): its step id from the run file's plan."""
    import json

    run = json.loads(next((prefix / "runs").glob("hello-2*.json")).read_text())
    return next(s["step_id"] for s in run["steps"] if s["name"] == "hello/summary").split("/", 1)[1]


def rows_by_name(rows: list[StepRow]) -> dict[str, StepRow]:
    return {r.name: r for r in rows}


def test_step_rows_are_typed_with_state_timing_attempts_error_and_run(hello_prefix):
    view = PrefixView.open(str(hello_prefix))
    rows = rows_by_name(view.steps(timings=True))
    assert set(rows) == {"hello/words", "hello/count", "hello/greeting", "hello/shout", "hello/summary",
                         "hello/broken"}
    words, shout, summary, broken = rows["hello/words"], rows["hello/shout"], rows["hello/summary"], rows["hello/broken"]
    assert words.state is State.SUCCESS and words.attempt == 1 and words.seconds is not None
    assert words.started_at <= words.finished_at and words.path == f"{hello_prefix}/{words.rel}"
    assert rows["hello/greeting"].state is State.SUCCESS and rows["hello/greeting"].seconds is None  # record corrupt
    assert shout.state is State.FAILED and "failing on purpose" in shout.error and shout.is_problem
    assert shout.run_id == words.run_id == view.runs()[0].run_id  # the run that wrote them
    assert summary.state is State.RUNNING and summary.owner.host == "other-host" and summary.attempt == 2
    assert 25 < summary.heartbeat_age(time.time()) < 600 and summary.finished_at is None
    assert broken.state is Absent.CORRUPT and broken.is_problem and broken.status is None
    assert broken.error.startswith("corrupt status file") and str(hello_prefix) not in broken.error
    assert broken.to_json()["state"] == "CORRUPT" and shout.to_json()["state"] == "FAILED"


def test_rows_of_named_output_dirs_say_no_status_for_those_never_started(hello_prefix):
    view = PrefixView.open(str(hello_prefix))
    row = view.steps(["hello/never-aaaaaaaaaaaa"], names={"hello/never-aaaaaaaaaaaa": "hello/never"})[0]
    assert row.state is Absent.NO_STATUS and row.name == "hello/never" and row.generation is None
    assert row.to_json()["state"] == "NO STATUS" and not row.is_problem


def test_leases_name_the_holder_and_heartbeat(hello_prefix):
    leases = PrefixView.open(str(hello_prefix)).leases()
    assert len(leases) == 1
    lease = leases[0]
    assert lease.step_id.startswith("hello/summary-") and lease.owner.pid == 4242 and lease.attempt == 2
    assert 25 < lease.age(time.time()) < 600


def test_runs_are_typed_with_who_what_and_how_it_ended(hello_prefix):
    runs = PrefixView.open(str(hello_prefix)).runs()
    assert [r.problem is None for r in runs] == [True, False]  # newest first; the unreadable one has no start
    run, unreadable = runs
    assert isinstance(run, RunRow) and run.exit_code == 1 and run.user and run.host
    assert run.argv[0] == str(HELLO) and "--fail-shout" in run.flags and run.experiment == "hello"
    shout = next(sid for sid in run.ran if sid.startswith("hello/shout-"))
    assert run.outcomes[shout] is Outcome.FAILED and shout in run.failed
    assert any(s.startswith("hello/summary-") for s in run.failed)  # blocked behind shout
    assert run.steps == 5 and run.skipped == 0 and run.seconds > 0
    assert "corrupt run file" in unreadable.problem and unreadable.to_json()["error"].startswith("unreadable run file")


def test_one_step_in_full_by_its_step_id(hello_prefix):
    view = PrefixView.open(str(hello_prefix))
    rows = rows_by_name(view.steps())
    count = view.step(rows["hello/count"].step_id)
    assert count.status.state is State.SUCCESS and count.result == {"distinct": count.result["distinct"]}
    assert count.record["step_id"] == count.step_id and count.record_problem is None
    assert count.dependencies == (rows["hello/words"].step_id,)
    assert count.dependents == (rows["hello/summary"].step_id,)  # from the run's graph: summary never ran
    assert [log.attempt for log in count.logs] == [1]
    shout = view.step(rows["hello/shout"].step_id)
    assert shout.record is None and [log.attempt for log in shout.logs] == [1, 2]
    assert view.log_tail(shout.step_id, 2).endswith("says hello from attempt 2\n")
    assert view.log_tail(shout.step_id, 1, max_bytes=10) == view.log_tail(shout.step_id, 1)[-10:] == "attempt 1\n"
    assert view.log_tail(shout.step_id, 7) == ""
    assert view.step("hello/nothing-ffffffffffff") is None
    greeting = view.step(rows["hello/greeting"].step_id)  # its record is corrupt: said, with the file
    assert greeting.record is None and greeting.status.state is State.SUCCESS
    assert f"{greeting.row.path}/.executor/record.json: corrupt record" in greeting.record_problem


class CountingStore:
    """A store that counts the keys read, to see what a refresh reads."""

    def __init__(self, inner):
        self.inner, self.root, self.keys_read = inner, inner.root, []

    def read(self, key):
        self.keys_read.append(key)
        return self.inner.read(key)

    def read_many(self, keys):
        self.keys_read += list(keys)
        return self.inner.read_many(keys)

    def list_generations(self, prefix, suffix):
        return self.inner.list_generations(prefix, suffix)


def test_a_refresh_lists_once_and_reads_only_the_statuses_that_changed(hello_prefix, tmp_path):
    prefix = tmp_path / "copy"
    shutil.copytree(hello_prefix, prefix)
    store = CountingStore(open_store(str(prefix)))
    view = PrefixView(store, str(prefix))
    rows = view.steps()
    assert view.refresh(rows) == rows
    store.keys_read.clear()
    assert view.refresh(rows) == rows and store.keys_read == []
    words = rows_by_name(rows)["hello/words"]
    inner = store.inner
    current = inner.read(status_key(words.rel))
    again = words.status.next(state=State.RUNNING, written_at=time.time())
    assert inner.replace_if_generation(status_key(words.rel), again.to_bytes(), current.generation)
    inner.delete(status_key(BROKEN))
    fresh = rows_by_name(view.refresh(rows))
    assert store.keys_read == [status_key(words.rel)]
    assert fresh["hello/words"].state is State.RUNNING and "hello/broken" not in fresh


@pytest.mark.parametrize("backend", ["memory", "s3"])
def test_the_same_rows_from_any_store(hello_prefix, backend, request):
    """Only the store protocol is read: the prefix's objects copied into another backend give the
    same rows."""
    if backend == "memory":
        import uuid

        url, options = f"memory://view-{uuid.uuid4().hex[:8]}", {}
    else:
        emulator = request.getfixturevalue("s3_emulator")
        url, options = emulator.fresh_prefix("view"), dict(emulator.storage_options)
    store = open_store(url, options)
    for path in hello_prefix.rglob("*"):
        if path.is_file() and not path.name.endswith(".lock"):
            assert store.create_if_absent(str(path.relative_to(hello_prefix)), path.read_bytes())
    here, there = PrefixView.open(str(hello_prefix)), PrefixView(store, url)
    local_rows = [(r.step_id, r.state, r.status, r.problem, r.seconds) for r in here.steps(timings=True)]
    assert [(r.step_id, r.state, r.status, r.problem, r.seconds) for r in there.steps(timings=True)] == local_rows
    assert [(r.run_id, r.argv, r.failed) for r in there.runs()] == [(r.run_id, r.argv, r.failed) for r in here.runs()]
    count = next(r for r in here.steps() if r.name == "hello/count").step_id
    assert there.step(count).dependencies == here.step(count).dependencies
    assert there.log_tail(count, 1) == here.log_tail(count, 1)
