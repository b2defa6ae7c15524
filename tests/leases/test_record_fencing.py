"""A holder whose lease was taken over while its step ran writes neither the status nor the
record (the record is written before the fenced commit, so the lease is confirmed first)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, this_output_path
from executor.cli import run
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
