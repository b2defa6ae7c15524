"""status, ps and repair: small inspection and repair commands over stored state."""

from __future__ import annotations

import json
import time
from pathlib import Path

from executor.core.record import Owner, State, Status

from .toy import run_main


def _running(prefix: str, step_id: str) -> Path:
    path = Path(prefix, step_id, ".executor")
    path.mkdir(parents=True)
    status = Status(State.RUNNING, "f" * 64, step_id, seq=7, attempt=2, owner=Owner("run-42", "worker-3", 4242, "ann"),
                    written_at=time.time() - 30)
    (path / "status.json").write_bytes(status.to_bytes())
    return path.parent


def test_status_shows_state_and_record(ran_toy):
    train = next(Path(ran_toy.prefix, "toy").glob("train-*"))
    code, out = run_main("status", str(train))
    assert code == 0, out
    assert "SUCCESS" in out and "toy.py:train" in out and "1 file(s)" in out and "depends on  toy/tokenize-" in out
    code, out = run_main("status", str(train / ".executor" / "status.json"))
    assert code == 0


def test_status_of_a_corrupt_step_names_its_file_and_the_repair(ran_toy):
    train = next(Path(ran_toy.prefix, "toy").glob("train-*"))
    (train / ".executor" / "status.json").write_text("{garbage")
    code, out = run_main("status", str(train))
    assert code == 2 and f"{train}/.executor/status.json: corrupt status file" in out, out
    assert f"repair --delete-status {train}" in out and "Traceback" not in out


def test_ps_lists_running_leases(ran_toy):
    _running(ran_toy.prefix, "toy/busy-111111111111")
    code, out = run_main("ps", "--prefix", ran_toy.prefix)
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("toy/busy"))
    assert "worker-3" in line and "4242" in line and "run-42" in line and "s ago" in line
    assert "toy/train" not in out  # SUCCESS steps are not leases


def test_ps_reads_every_status_in_one_read_many_not_one_at_a_time(ran_toy, monkeypatch):
    from executor.engine.store.local import LocalStore

    _running(ran_toy.prefix, "toy/busy-111111111111")
    batches = []
    read_many = LocalStore.read_many

    def counted(self, keys):
        batches.append(list(keys))
        return read_many(self, keys)

    def one_at_a_time(self, key):
        raise AssertionError(f"ps read {key} on its own")

    monkeypatch.setattr(LocalStore, "read_many", counted)
    monkeypatch.setattr(LocalStore, "read", one_at_a_time)
    code, out = run_main("ps", "--prefix", ran_toy.prefix)
    assert code == 0 and "toy/busy-111111111111" in out, out
    statuses = sorted(str(p.relative_to(ran_toy.prefix)) for p in Path(ran_toy.prefix).glob("toy/*/.executor/status.json"))
    # The listing (a local one reads each status to hash it) and the read of the statuses: each in one
    # read_many of every status, never one at a time or a batch per key.
    assert len(batches) <= 2 and all(sorted(b) == statuses for b in batches), batches


def test_repair_deletes_a_corrupt_status_but_not_a_running_one(ran_toy):
    train = next(Path(ran_toy.prefix, "toy").glob("train-*"))
    (train / ".executor" / "status.json").write_text("{garbage")
    code, out = ran_toy.run("--dry-run")
    assert code == 2 and "repair --delete-status" in out
    code, out = run_main("status", "--prefix", ran_toy.prefix)
    assert code == 1 and "CORRUPT" in out, out  # a corrupt status is a problem found (exit 1)
    code, out = run_main("repair", "--delete-status", str(train))
    assert code == 0 and "deleted" in out, out
    code, out = ran_toy.run("--dry-run", "--json")
    assert code == 0 and "new: no previous attempt" in [step["reason"] for step in json.loads(out)["steps"]]

    busy = _running(ran_toy.prefix, "toy/busy-111111111111")
    code, out = run_main("repair", "--delete-status", str(busy))
    assert code == 2 and "refusing" in out and "worker-3" in out
    assert (busy / ".executor" / "status.json").exists()
    code, out = run_main("repair", "--delete-status", str(busy), "--force")
    assert code == 0 and not (busy / ".executor" / "status.json").exists()


def test_usage_errors_exit_2(tmp_path, monkeypatch):
    # the default prefix may hold the quickstart's outputs (the README runs it before the tests)
    monkeypatch.setenv("EXECUTOR_PREFIX", str(tmp_path / "nothing-here"))
    assert run_main("verify")[0] == 2
    assert run_main("nonsense")[0] == 2
    code, out = run_main("ids", str(tmp_path / "missing.py"))
    assert code == 2 and "does not exist" in out
