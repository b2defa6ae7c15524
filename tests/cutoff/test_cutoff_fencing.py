"""Early cutoff's commit is fenced like a step's (executor/engine/run/cutoff.py, `Cutoffs._commit`): the
SUCCESS alias lands only by a compare-and-swap against the generation this run's lease last wrote, and a
lease lapsed only by our own silence is reclaimed (one CAS) before the commit, as a step's is (issue 51).

Both interleavings are injected into one in-process run of the three-step chain (inline runner, local
prefix): a takeover written between the cutoff's `confirm` and its commit (another runner that judged
the lease stale and wrote the status), and a lease clock that jumps past half the TTL just as the cutoff
confirms its lease (a renewal stuck in backoff, a starved process). No sleeps, no second process.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import executor
from executor.core.record import Owner, State, parse_status
from executor.engine.run import cutoff, lease
from executor.engine import events
from executor.engine.run.lease import LeaseKeeper
from tests.cutoff.chain_experiment import chain

TTL_S = 600.0  # renewals every 200 s: none lands between the jump and the commit
INTRUDER = Owner(run_id="intruder-run", host="elsewhere", pid=1, user="someone")


def statuses(prefix: Path, name: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in prefix.glob(f"cut/{name}-*/.executor/status.json")]
    return sorted(found, key=lambda s: s["written_at"])


def first_run(prefix: Path) -> None:
    assert executor.run(chain(), prefix=str(prefix), runner="inline").ok


def test_a_takeover_between_the_cutoffs_confirm_and_its_commit_wins_the_cutoffs_write_does_not_land(
        tmp_path, monkeypatch):
    """The cutoff of cut/upper confirms its lease and writes its record; then another runner writes the
    status (a takeover: here it commits the same alias, as its own cutoff would). The fenced commit must
    find the generation changed and publish nothing; a plain write would overwrite the other's status."""
    first_run(tmp_path)
    write_record, taken = cutoff.Cutoffs._write_record, []

    def record_then_taken_over(self, node, lease, found, consumed, alias_of, wall):
        write_record(self, node, lease, found, consumed, alias_of, wall)
        if node.name != "cut/upper" or taken:
            return
        store, key = self.board.ctx.store, lease.key
        current = store.read(key)
        theirs = replace(parse_status(current.data, key), state=State.SUCCESS, seq=99, owner=INTRUDER,
                         alias_of=alias_of, content_sha256=found.content_sha256, written_at=wall + 1)
        assert store.replace_if_generation(key, theirs.to_bytes(), current.generation) is not None
        taken.append(key)

    monkeypatch.setattr(cutoff.Cutoffs, "_write_record", record_then_taken_over)
    seen: list = []
    result = executor.run(chain(write_version="2"), prefix=str(tmp_path), runner="inline",
                          subscribers=[seen.append])

    assert taken, "the takeover was never injected: the test did not test the commit"
    assert result.ok, result
    new_upper = statuses(tmp_path, "upper")[-1]
    assert new_upper["owner"]["run_id"] == "intruder-run" and new_upper["seq"] == 99, new_upper  # theirs stands
    lost = [e for e in seen if isinstance(e, events.LeaseLost) and e.node.name == "cut/upper"]
    assert [e.reason for e in lost] == ["taken over by another runner before commit"], seen
    assert not any(isinstance(e, events.StepFinished) and e.node.name == "cut/upper" and e.cut_off for e in seen)


class LeaseClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_cutoff_whose_lease_lapsed_by_our_own_silence_reclaims_it_and_commits_once(tmp_path, monkeypatch):
    """Between cut/upper's lease being taken and the cutoff's commit, the lease clock jumps past half the
    TTL (nobody else writes the status). The commit reclaims the lease by one CAS and lands: one lease
    lost never reported, attempt 1, seq one past the reclaim. Without the reclaim the lease is reported
    lost and the step is taken again under a second attempt."""
    first_run(tmp_path)
    clock, jumped = LeaseClock(), []
    monkeypatch.setattr(lease, "LeaseKeeper", lambda store, settings: LeaseKeeper(store, settings, clock))
    find = cutoff.find

    def find_then_silent(store, fs, prefix, node, now, listed):
        found = find(store, fs, prefix, node, now, listed)
        if node.name == "cut/upper" and found is not None and not jumped:
            clock.now += TTL_S / 2 + 1  # as long a silence as a renewal stuck in backoff
            jumped.append(node.name)
        return found

    monkeypatch.setattr(cutoff, "find", find_then_silent)
    seen: list = []
    result = executor.run(chain(write_version="2"), prefix=str(tmp_path), runner="inline", lease_ttl=TTL_S,
                          heartbeat_interval=200, subscribers=[seen.append])

    assert jumped, "the lease clock never jumped: the test did not inject its interleaving"
    assert result.ok, result
    assert not [e for e in seen if isinstance(e, events.LeaseLost)], seen
    old_upper, new_upper = statuses(tmp_path, "upper")
    assert new_upper["alias_of"]["step_id"] == old_upper["step_id"]
    assert (new_upper["attempt"], new_upper["seq"]) == (1, 2), new_upper  # taken (0), reclaimed (1), committed (2)
    assert new_upper["owner"]["run_id"] == result.run_id
