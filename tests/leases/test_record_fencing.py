"""A holder whose lease was taken over while its step ran writes neither the status nor the
record (the record is written before the fenced commit, so the lease is confirmed first); one
whose heartbeat finds the takeover while the step still runs stops the step, and waits on the new
holder as on any other."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import executor
from executor import ExecutorStep, Resources, this_output_path
from executor.cli import run
from executor.core.record import Owner, State, Status, status_key
from executor.engine.events import LeaseLost, StepRetried, StepStarted, StepWaiting
from executor.engine.store import open_store
from executor.engine.store.local import LocalStore
from tests.watch_clock import quick_takeovers

STOLEN = {"pid": 999999, "run_id": "thief-run"}


@dataclass(frozen=True)
class StealConfig:
    output_path: str


def steal_then_return(config: StealConfig) -> dict:
    """First call: another runner 'takes over' the lease mid-step. Later calls: the retaker."""
    marker = Path(os.environ["FENCING_DIR"])
    calls = len(list(marker.glob("call-*")))
    (marker / f"call-{calls}").write_text(
        json.dumps({"record_existed": Path(config.output_path, ".executor/record.json").exists()}))
    if calls == 0:
        store = open_store(config.output_path)
        current = store.read(".executor/status.json")
        status = json.loads(current.data)
        status.update(seq=status["seq"] + 1, attempt=status["attempt"] + 1,
                      owner={**status["owner"], **STOLEN})
        assert store.replace_if_generation(".executor/status.json", json.dumps(status).encode(),
                                           current.generation) is not None
    Path(config.output_path, "out.txt").write_text("same bytes whoever writes them")
    return {"call": calls}


def test_taken_over_holder_writes_no_record(tmp_path, monkeypatch, capsys):
    quick_takeovers(monkeypatch)  # the robbed holder follows the thief, who never renews: no TTL waited out
    monkeypatch.setenv("FENCING_DIR", str(tmp_path))
    steps = [ExecutorStep("fence/one", steal_then_return, StealConfig(this_output_path()))]
    code = run(steps, "fencing", argv=["--prefix", str(tmp_path / "p"), "--runner", "inline",
                                       "--lease-ttl", "3", "--heartbeat-interval", "1"],
               environ={}, main_file=__file__)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "lease lost (taken over by another runner" in out and "took over a stale lease" in out
    calls = [json.loads((tmp_path / f"call-{i}").read_text()) for i in range(2)]
    assert not (tmp_path / "call-2").exists()
    assert calls[1] == {"record_existed": False}  # the robbed holder wrote no record
    (status_file,) = (tmp_path / "p").glob("fence/one-*/.executor/status.json")
    status = json.loads(status_file.read_text())
    record = json.loads((status_file.parent / "record.json").read_text())
    assert status["state"] == "SUCCESS" and status["attempt"] == 3
    assert record["attempt"] == 3 and record["result"] == {"call": 1}


def take_the_lease_as_another_runner(output_path: str) -> None:
    """What a runner taking over does: its own attempt and owner, CAS'd over the status."""
    store = open_store(output_path)
    current = store.read(".executor/status.json")
    status = json.loads(current.data)
    status.update(seq=status["seq"] + 1, attempt=status["attempt"] + 1, owner={**status["owner"], **STOLEN})
    assert store.replace_if_generation(".executor/status.json", json.dumps(status).encode(),
                                       current.generation) is not None


def steal_then_keep_writing(config: StealConfig) -> dict:
    """First call: another runner 'takes over' the lease, then this holder keeps writing into a log
    until it is stopped. The retaker's call measures whether the old holder still writes."""
    marker = Path(os.environ["FENCING_DIR"])
    calls = len(list(marker.glob("call-*")))
    (marker / f"call-{calls}").write_text("")
    log = marker / "old-holder-writes"
    if calls == 0:
        take_the_lease_as_another_runner(config.output_path)
        while True:  # a step that would run for ever: only the runner can stop it
            with log.open("a") as f:
                f.write("x")
            time.sleep(0.1)
    before = log.stat().st_size
    time.sleep(1.0)
    return {"old_holder_wrote": log.stat().st_size - before}


def test_a_holder_told_by_its_heartbeat_that_its_lease_was_taken_is_stopped(tmp_path, monkeypatch):
    """The run first waits on a silent runner's lease (announced once) and takes it over after the
    TTL; then, while the step runs, the heartbeat finds the status changed under it: the run reports
    the lease lost with its reason, stops the step (it writes nothing more), announces the new
    holder as a new wait and takes the lease over once that holder goes silent past the TTL."""
    monkeypatch.setenv("FENCING_DIR", str(tmp_path))
    quick_takeovers(monkeypatch)  # both silent holders taken over without waiting out the TTL
    prefix = tmp_path / "p"
    step = ExecutorStep("fence/writer", steal_then_keep_writing, StealConfig(this_output_path()))
    [planned] = executor.plan([step], prefix=str(prefix)).steps
    silent = Owner("silent-run", "elsewhere", 4242, "someone")
    LocalStore(str(prefix)).create_if_absent(status_key(planned.output_path[len(str(prefix)) + 1:]), Status(
        State.RUNNING, planned.digest, planned.step_id, 1, 1, silent, time.time(), started_at=time.time()).to_bytes())
    events: list[Any] = []

    def note(event) -> None:
        events.append(event)
        if isinstance(event, StepStarted):
            assert sum(isinstance(e, StepStarted) for e in events) <= 2, "started again and again"  # fail fast

    result = executor.run([step], prefix=str(prefix), runner="inline", lease_ttl=3, heartbeat_interval=0.5,
                          subscribers=[note])
    assert result.ok, result
    waits = [e.status.owner.run_id for e in events if isinstance(e, StepWaiting) and e.first]
    assert waits == ["silent-run", STOLEN["run_id"]], waits
    assert [(e.attempt, e.takeover) for e in events if isinstance(e, StepStarted)] == [(2, True), (4, True)]
    assert [e.reason for e in events if isinstance(e, LeaseLost)] == [
        "taken over by another runner (status changed under us)"]
    [record] = prefix.glob("fence/writer-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"old_holder_wrote": 0}, "the robbed holder was not stopped"
    assert not (tmp_path / "call-2").exists()


def steal_then_fail(config: StealConfig) -> dict:
    """First call: another runner 'takes over' the lease, then this call fails (as an inline step
    does when it stops itself, its runner silent past half the TTL). Later calls: the retaker's."""
    marker = Path(os.environ["FENCING_DIR"])
    calls = len(list(marker.glob("call-*")))
    (marker / f"call-{calls}").write_text("")
    if calls == 0:
        take_the_lease_as_another_runner(config.output_path)
        raise RuntimeError("stopped: my lease is gone")
    return {"call": calls}


def test_a_step_that_ends_in_error_after_its_lease_was_taken_is_not_failed_but_followed(tmp_path, monkeypatch):
    """Its error is the lost lease's doing, not the step's: no FAILED status, no user retry under
    the lost lease; LeaseLost with the reason, then the run waits on the new holder and retakes it."""
    quick_takeovers(monkeypatch)  # the robbed holder follows the thief, who never renews: no TTL waited out
    monkeypatch.setenv("FENCING_DIR", str(tmp_path))
    events: list[Any] = []
    step = ExecutorStep("fence/failer", steal_then_fail, StealConfig(this_output_path()),
                        resources=Resources(retry_user_errors=1))
    result = executor.run([step], prefix=str(tmp_path / "p"), runner="inline", lease_ttl=3, heartbeat_interval=1,
                          subscribers=[events.append])
    assert result.ok, result
    assert [e.reason for e in events if isinstance(e, LeaseLost)] == [
        "taken over by another runner (status changed under us)"]
    assert not [e for e in events if isinstance(e, StepRetried)]
    assert [(e.attempt, e.takeover) for e in events if isinstance(e, StepStarted)] == [(1, False), (3, True)]
    [record] = (tmp_path / "p").glob("fence/failer-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"call": 1}


def test_a_lease_taken_between_the_record_and_the_commit_is_lost_with_its_reason(tmp_path, monkeypatch):
    """The record is written after the lease is confirmed; a runner that takes the lease in the
    moment between makes the fenced commit fail: the holder reports the lease lost *with the reason
    the commit found* (and follows the new holder, which here never renews: taken over after its TTL)."""
    from executor.engine.run.step_job import StepJob

    write_record = StepJob.write_record
    stolen: list[str] = []

    def steal_then_write(self, result, result_type=None):
        if not stolen:
            stolen.append(self.node.name)
            take_the_lease_as_another_runner(self.output_path)
        return write_record(self, result, result_type)

    monkeypatch.setattr(StepJob, "write_record", steal_then_write)
    quick_takeovers(monkeypatch)
    lost: list[LeaseLost] = []
    step = ExecutorStep("fence/commit", write_marker_file, StealConfig(this_output_path()))
    result = executor.run([step], prefix=str(tmp_path), runner="inline", lease_ttl=2, heartbeat_interval=0.5,
                          subscribers=[lambda e: lost.append(e) if isinstance(e, LeaseLost) else None])
    assert result.ok and stolen == ["fence/commit"]
    assert [e.reason for e in lost] == ["taken over by another runner before commit"]


def write_marker_file(config: StealConfig) -> dict:
    Path(config.output_path, "out.txt").write_text("x")
    return {}
