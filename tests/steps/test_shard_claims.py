"""Two runners growing the same corpus at once make each new shard once (steps/shard_reuse.py's
claims, executor.claim_once on the executor's lease machinery): real runner subprocesses on one
prefix, each shard's encoding counted by evidence files (tests/steps/grow_experiment.py), and the
claims' own protocol (a live holder is waited for, a silent one taken over, a damaged result made
again) with an injected clock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from executor import ClaimSettings, claim_once
from steps.shard_reuse import CLAIMS_DIR
from tests.steps.test_incremental_shards import (SHARDS, _shard_docs, assert_same_bytes, run_step, tokenize_step,
                                                 write_corpus)

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = Path(__file__).with_name("grow_experiment.py")


def runner(prefix: Path, corpus: str, tokenizer: str, sidefx: Path, *flags: str, **extra: str) -> subprocess.Popen:
    environ = {**os.environ, "GROW_CORPUS": corpus, "GROW_TOKENIZER": tokenizer, "GROW_SIDEFX": str(sidefx),
               "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **extra}
    return subprocess.Popen([sys.executable, str(EXPERIMENT), "--prefix", str(prefix), "--runner", "inline", *flags],
                            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def made(sidefx: Path) -> Counter:
    """How many times each shard was encoded (evidence files), then forget them."""
    counts = Counter("-".join(p.name.split("-")[1:3]) for p in sidefx.glob("made-*"))
    for path in sidefx.glob("made-*"):
        path.unlink()
    return counts


@pytest.fixture(scope="module")
def growing(tmp_path_factory) -> dict[str, str]:
    """`first`: 16 shards; `a`: those and 4 new ones; `b`: the same 20 in another folder (another
    step id) and one more that only b has."""
    from steps.bpe import train_byte_level_bpe

    root = tmp_path_factory.mktemp("growing")
    first = {f"part-{i:05d}": _shard_docs(i) for i in range(SHARDS)}
    a = {**first, **{f"part-{i:05d}": _shard_docs(i) for i in range(SHARDS, SHARDS + 4)}}
    b = {**a, f"part-{SHARDS + 4:05d}": _shard_docs(SHARDS + 4)}
    tokenizer = train_byte_level_bpe([d["text"] for docs in first.values() for d in docs], 400, "<|endoftext|>",
                                     min_frequency=2)
    (root / "tokenizer.json").write_text(tokenizer.to_str())
    return {"first": write_corpus(root / "first", first), "a": write_corpus(root / "a", a),
            "b": write_corpus(root / "b", b), "tokenizer": str(root / "tokenizer.json")}


@pytest.mark.timeout(300)
def test_two_runners_growing_the_same_corpus_make_each_new_shard_once(growing, tmp_path):
    prefix, sidefx, barrier = tmp_path / "prefix", tmp_path / "sidefx", tmp_path / "barrier"
    sidefx.mkdir()
    barrier.mkdir()
    first = runner(prefix, growing["first"], growing["tokenizer"], sidefx)
    assert first.wait(timeout=180) == 0, first.stdout.read()
    assert made(sidefx) == Counter({f"part-{i:05d}": 1 for i in range(SHARDS)})
    # both runners meet at the barrier, then reach the new shards together; each encode takes 0.5 s more
    racers = [runner(prefix, growing[name], growing["tokenizer"], sidefx, GROW_BARRIER=str(barrier),
                     GROW_PEERS="2", GROW_SLEEP_S="0.5") for name in ("a", "b")]
    outs = [r.communicate(timeout=240)[0] for r in racers]
    assert [r.returncode for r in racers] == [0, 0], outs
    assert made(sidefx) == Counter({f"part-{i:05d}": 1 for i in range(SHARDS, SHARDS + 5)}), outs
    results = {json.loads(p.read_text())["config"]["input_path"]: json.loads(p.read_text())["result"]
               for p in prefix.glob("tokenized-*/.executor/record.json")}
    grown = [results[growing["a"]], results[growing["b"]]]
    assert sum(r["shards_processed"] for r in grown) == 5  # the 4 shared new shards once, b's own once
    assert [r["shards_processed"] + r["shards_reused"] for r in grown] == [SHARDS + 4, SHARDS + 5]
    claims = [json.loads(p.read_text()) for p in (prefix / CLAIMS_DIR / "tokenized").glob("*.json")]
    assert len(claims) == SHARDS + 5 and {c["state"] for c in claims} == {"SUCCESS"}
    assert {c["attempt"] for c in claims} == {1}  # one claim each, ended by its maker: nobody took one over
    a_out = next(p for p in prefix.glob("tokenized-*")
                 if json.loads((p / ".executor/record.json").read_text())["config"]["input_path"] == growing["a"])
    full, _ = run_step(tokenize_step(growing["a"], growing["tokenizer"]), tmp_path / "full")
    assert_same_bytes(str(a_out), full)


CLAIM_TTL_S = 120  # far above what the restart needs, so finishing before it shows no claim was waited out


@pytest.mark.timeout(400)
def test_a_restart_takes_a_killed_runners_shard_claims_over_without_waiting_their_ttl(growing, tmp_path):
    """A runner SIGKILLed (with its step's child) while shards are in flight leaves their claims
    RUNNING. The restart takes the step's lease over (its TTL is short here), and then each such claim
    at once, since the step lease the claim names has moved on, not after the claims' TTL."""
    prefix, sidefx = tmp_path / "prefix", tmp_path / "sidefx"
    sidefx.mkdir()
    short_lease = ("--lease-ttl", "6", "--heartbeat-interval", "1")
    killed = runner(prefix, growing["a"], growing["tokenizer"], sidefx, *short_lease,
                    GROW_CLAIM_TTL_S=str(CLAIM_TTL_S), GROW_SLEEP_S="600")
    deadline = time.monotonic() + 180
    while not list(sidefx.glob("made-*")):  # a shard encoded; its maker sleeps, its claim held
        assert killed.poll() is None and time.monotonic() < deadline, killed.stdout.read() if killed.poll() else "slow"
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    in_flight = [json.loads(p.read_text()) for p in (prefix / CLAIMS_DIR / "tokenized").glob("*.json")]
    assert in_flight and {c["state"] for c in in_flight} == {"RUNNING"}
    assert {c["alias_of"]["attempt"] for c in in_flight} == {"1"}  # each names the step lease it was taken under
    made(sidefx)
    started = time.monotonic()
    restart = runner(prefix, growing["a"], growing["tokenizer"], sidefx, *short_lease,
                     GROW_CLAIM_TTL_S=str(CLAIM_TTL_S))
    out = restart.communicate(timeout=CLAIM_TTL_S * 2)[0]
    elapsed = time.monotonic() - started
    assert restart.returncode == 0, out
    assert elapsed < CLAIM_TTL_S * 0.75, f"the restart took {elapsed:.0f}s: it waited the claims' TTL\n{out}"
    assert made(sidefx) == Counter({f"part-{i:05d}": 1 for i in range(SHARDS + 4)})  # none was done before
    claims = {p.name: json.loads(p.read_text()) for p in (prefix / CLAIMS_DIR / "tokenized").glob("*.json")}
    assert {c["state"] for c in claims.values()} == {"SUCCESS"} and {c["attempt"] for c in claims.values()} == {1, 2}
    taken = [c for c in claims.values() if c["attempt"] == 2]
    assert len(taken) == len(in_flight)
    done = next(prefix.glob("tokenized-*"))
    full, _ = run_step(tokenize_step(growing["a"], growing["tokenizer"]), tmp_path / "full")
    assert_same_bytes(str(done), full)


def test_a_claim_whose_step_lease_moved_on_is_taken_at_once_and_a_live_ones_is_waited_for(tmp_path):
    """The claim's step lease (injected clock): while that step status shows the claim's attempt and
    owner the claim is waited for; once another attempt holds it, the claim is taken over at once."""
    from executor.core.record import Owner, State, Status

    (tmp_path / "step" / ".executor").mkdir(parents=True)
    lease = tmp_path / "step" / ".executor" / "status.json"
    lease.write_bytes(Status(State.RUNNING, "d", "step", 0, 1, Owner("run-1", "h", 1, ""), 0.0).to_bytes())
    url = str(tmp_path / "abc.json")
    Path(url).write_bytes(Status(State.RUNNING, "abc", "x", 0, 1, Owner("claim", "h", 1, ""), 0.0,
                                 alias_of={"lease": str(lease), "run_id": "run-1", "attempt": "1"}).to_bytes())
    clock, sleep = _fake_clock()
    slept: list[float] = []

    def sleep_then_restart(s: float) -> None:  # after 5 s of waiting, the step is taken over by a restart
        slept.append(s)
        sleep(s)
        if sum(slept) >= 5 and b'"attempt": 1' in lease.read_bytes():
            lease.write_bytes(Status(State.RUNNING, "d", "step", 1, 2, Owner("run-2", "h", 2, ""), 0.0).to_bytes())

    settings = ClaimSettings(ttl_s=100, heartbeat_s=1, poll_s=0.5)
    result = claim_once(url, lambda where: None, lambda: ("made", "here"), clock=clock, sleep=sleep_then_restart,
                        settings=settings, holder=str(lease))
    assert result == ("made", True)
    assert 5 <= sum(slept) < 10  # waited while the lease was live, then no TTL (100 s)
    assert json.loads(Path(url).read_text())["attempt"] == 2


def _fake_clock():
    now = [0.0]
    return (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def test_a_live_claim_is_waited_for_and_a_silent_one_taken_over(tmp_path):
    """A claim held by a runner that keeps renewing is waited on; one that stays silent for the TTL
    (its runner died) is taken over by CAS and the work made here (injected clock: no sleeping)."""
    from executor.core.record import Owner, State, Status

    url = str(tmp_path / "claims" / "abc.json")
    (tmp_path / "claims").mkdir()
    held = Status(State.RUNNING, "abc", "x", 0, 1, Owner("dead", "h", 1, ""), 0.0)
    Path(url).write_bytes(held.to_bytes())
    clock, sleep = _fake_clock()
    slept: list[float] = []

    def counted_sleep(s: float) -> None:
        slept.append(s)
        sleep(s)

    result, here = claim_once(url, lambda where: None, lambda: ("made", "here"), clock=clock, sleep=counted_sleep,
                              settings=ClaimSettings(ttl_s=10, heartbeat_s=1, poll_s=0.5))
    assert (result, here) == ("made", True)
    assert sum(slept) >= 10  # waited the TTL of silence before taking it over
    status = json.loads(Path(url).read_text())
    assert (status["state"], status["attempt"], status["alias_of"]) == ("SUCCESS", 2, {"where": "here"})


def test_a_finished_claim_whose_result_is_gone_is_made_again(tmp_path):
    url = str(tmp_path / "abc.json")
    first = claim_once(url, lambda where: None, lambda: ("one", "out-1"))
    asked: list = []
    second = claim_once(url, lambda where: asked.append(where) or ("found" if where == "out-1" else None),
                        lambda: ("two", "out-2"))
    assert first == ("one", True) and second == ("found", False) and asked == ["out-1"]
    third = claim_once(url, lambda where: None, lambda: ("three", "out-3"))  # out-1 was deleted (say, by gc)
    assert third == ("three", True)
    assert json.loads(Path(url).read_text())["alias_of"] == {"where": "out-3"}


def test_a_failed_make_ends_the_claim_failed_and_the_next_runner_makes_it(tmp_path):
    url = str(tmp_path / "abc.json")

    def broken():
        raise OSError("disk full")

    with pytest.raises(OSError):
        claim_once(url, lambda where: None, broken)
    assert json.loads(Path(url).read_text())["state"] == "FAILED"
    assert claim_once(url, lambda where: None, lambda: ("ok", "out")) == ("ok", True)


def test_the_claims_folder_is_beside_the_outputs_and_none_for_an_unnamed_output():
    from steps.shard_reuse import claims_folder

    assert claims_folder("gs://b/p/tokenized-0123456789ab") == f"gs://b/p/{CLAIMS_DIR}/tokenized"
    assert claims_folder("/tmp/out") is None
