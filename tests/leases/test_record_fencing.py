"""A holder whose lease was taken over while its step ran writes neither the status nor the
record (the record is written before the fenced commit, so the lease is confirmed first); one
whose heartbeat finds the takeover while the step still runs stops the step."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import executor
from executor import ExecutorStep, this_output_path
from executor.cli import run
from executor.engine.events import LeaseLost, StepStarted
from executor.engine.store import open_store

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
    monkeypatch.setenv("FENCING_DIR", str(tmp_path))
    steps = [ExecutorStep("fence/one", steal_then_return, StealConfig(this_output_path()))]
    code = run(steps, "fencing", argv=["--prefix", str(tmp_path / "p"), "--runner", "inline",
                                       "--lease-ttl", "3", "--heartbeat-interval", "1"],
               environ={}, main_file=__file__)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "lease lost" in out and "took over a stale lease" in out
    calls = [json.loads((tmp_path / f"call-{i}").read_text()) for i in range(2)]
    assert not (tmp_path / "call-2").exists()
    assert calls[1] == {"record_existed": False}  # the robbed holder wrote no record
    (status_file,) = (tmp_path / "p").glob("fence/one-*/.executor/status.json")
    status = json.loads(status_file.read_text())
    record = json.loads((status_file.parent / "record.json").read_text())
    assert status["state"] == "SUCCESS" and status["attempt"] == 3
    assert record["attempt"] == 3 and record["result"] == {"call": 1}


def steal_then_keep_writing(config: StealConfig) -> dict:
    """First call: another runner 'takes over' the lease, then this holder keeps writing into a log
    until it is stopped. The retaker's call measures whether the old holder still writes."""
    marker = Path(os.environ["FENCING_DIR"])
    calls = len(list(marker.glob("call-*")))
    (marker / f"call-{calls}").write_text("")
    log = marker / "old-holder-writes"
    if calls == 0:
        store = open_store(config.output_path)
        current = store.read(".executor/status.json")
        status = json.loads(current.data)
        status.update(seq=status["seq"] + 1, attempt=status["attempt"] + 1, owner={**status["owner"], **STOLEN})
        assert store.replace_if_generation(".executor/status.json", json.dumps(status).encode(),
                                           current.generation) is not None
        while True:  # a step that would run for ever: only the runner can stop it
            with log.open("a") as f:
                f.write("x")
            time.sleep(0.1)
    before = log.stat().st_size
    time.sleep(1.0)
    return {"old_holder_wrote": log.stat().st_size - before}


def test_a_holder_told_by_its_heartbeat_that_its_lease_was_taken_is_stopped(tmp_path, monkeypatch):
    """The heartbeat finds the status changed under it while the step runs: the run reports the
    lease lost with its reason, stops the step (it writes nothing more), waits on the new holder and
    takes the lease over once that holder goes silent past the TTL."""
    monkeypatch.setenv("FENCING_DIR", str(tmp_path))
    lost: list[LeaseLost] = []
    starts: list[StepStarted] = []

    def note(event) -> None:
        lost.extend([event] if isinstance(event, LeaseLost) else [])
        if isinstance(event, StepStarted):
            starts.append(event)
            assert len(starts) <= 2, "started again and again"  # fails the run at once, not at the suite's timeout

    result = executor.run([ExecutorStep("fence/writer", steal_then_keep_writing, StealConfig(this_output_path()))],
                          prefix=str(tmp_path / "p"), runner="inline", lease_ttl=3, heartbeat_interval=1,
                          subscribers=[note])
    assert result.ok, result
    assert [(e.attempt, e.takeover) for e in starts] == [(1, False), (3, True)]
    assert [e.reason for e in lost] == ["taken over by another runner (status changed under us)"]
    [record] = (tmp_path / "p").glob("fence/writer-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"old_holder_wrote": 0}, "the robbed holder was not stopped"
    assert not (tmp_path / "call-2").exists()
