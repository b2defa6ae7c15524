"""The headline promises, each through the real command line of an experiment (subprocesses):

- the fenced commit: a holder whose lease was taken over can never publish (lease.finish CASes
  against the holder's own last generation, not against whatever is there now);
- `--force-run REGEX` re-runs a step that already succeeded;
- a `secret()` value is never written anywhere under the prefix;
- a failed step blocks its dependents *transitively*, the rest of the graph finishes, and the run
  returns (exit 1) instead of waiting forever.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from executor.core.record import Owner, State, Status, parse_status
from executor.engine.run.lease import LeaseKeeper, LeaseSettings, StalenessWatch
from executor.engine.store.memory import MemoryStore

CHAIN = Path(__file__).with_name("chain.py")
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-9f3b2c7e1d-never-stored"


def run_chain(prefix: Path, *flags: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, CHAIN_TOKEN=TOKEN, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(CHAIN), "--prefix", str(prefix), "--runner", "inline", *flags],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def statuses(prefix: Path) -> dict[str, Status]:
    found = {}
    for path in prefix.glob("chain/*/.executor/status.json"):
        status = parse_status(path.read_bytes(), str(path))
        found[status.step_id.rsplit("-", 1)[0]] = status
    return found


def output_of(prefix: Path, name: str) -> str:
    (path,) = prefix.glob(f"{name}-*/out.txt")
    return path.read_text()


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_taken_over_holder_cannot_commit_even_while_it_believes_its_lease_valid():
    store, clock = MemoryStore("memory://promise-fencing"), Clock()
    old, new = LeaseKeeper(store, LeaseSettings(60, 15), clock), LeaseKeeper(store, LeaseSettings(60, 15), clock)
    running = Status(State.RUNNING, "d" * 64, "s-ddd", 0, 1, Owner("old", "h", 1, "u"), 0.0)
    old_lease = old.acquire("k", running, None)
    watch = StalenessWatch(60, clock)
    seen = store.read("k")
    watch.observe("k", seen.generation)
    clock.now += 61                      # the old holder was paused past the TTL ...
    assert watch.is_stale("k", seen.generation)
    new_lease = new.acquire("k", running.next(attempt=2, owner=Owner("new", "h", 2, "u")), seen)
    assert new_lease is not None
    old_lease.renewed_at = clock.now     # ... and wakes up believing its lease is still fresh
    assert old.is_valid(old_lease)
    assert old.finish(old_lease, old_lease.status.next(state=State.SUCCESS)) is False
    current = parse_status(store.read("k").data, "k")
    assert current.state == State.RUNNING and current.owner.run_id == "new"
    assert new.finish(new_lease, new_lease.status.next(state=State.SUCCESS)) is True


def test_force_run_reruns_a_succeeded_step_and_only_what_it_names(tmp_path):
    first = run_chain(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    before = statuses(tmp_path)
    d_before, a_before = output_of(tmp_path, "chain/d"), output_of(tmp_path, "chain/a")
    again = run_chain(tmp_path, "--force-run", "^chain/d$")
    assert again.returncode == 0, again.stdout + again.stderr
    after = statuses(tmp_path)
    assert after["chain/d"].attempt == before["chain/d"].attempt + 1
    assert output_of(tmp_path, "chain/d") != d_before          # really ran again (another pid)
    assert after["chain/a"] == before["chain/a"] and output_of(tmp_path, "chain/a") == a_before


def test_a_secret_value_is_never_written_under_the_prefix(tmp_path):
    done = run_chain(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    failed = run_chain(tmp_path / "failed", "--fail-a")
    assert failed.returncode == 1
    dry = run_chain(tmp_path / "dry", "--dry-run")
    assert dry.returncode == 0
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "record.json" for p in files)
    record = json.loads(next(tmp_path.glob("chain/d-*/.executor/record.json")).read_text())
    assert record["result"]["token_chars"] == len(TOKEN)   # the step did receive the secret
    leaks = [str(p) for p in files if TOKEN.encode() in p.read_bytes()]
    assert not leaks, f"the secret was written to {leaks}"
    for proc in (done, failed, dry):
        assert TOKEN not in proc.stdout + proc.stderr


def test_a_failure_blocks_its_dependents_transitively_and_the_run_returns(tmp_path):
    result = run_chain(tmp_path, "--fail-a", timeout=120)   # hanging here is the broken promise
    assert result.returncode == 1, result.stdout + result.stderr
    found = statuses(tmp_path)
    assert found["chain/a"].state == State.FAILED
    assert "chain/b" not in found and "chain/c" not in found      # never started
    assert found["chain/d"].state == State.SUCCESS                # the other branch finished
    assert "chain/a" in result.stdout + result.stderr
