"""Two runners growing the same corpus at once make each new shard once (steps/shard_reuse.py's
claims, executor.claim_once on the executor's lease machinery): real runner subprocesses on one
prefix, each shard's encoding counted by evidence files (tests/steps/grow_experiment.py), and the
claims' own protocol (a live holder is waited for, a silent one taken over, a damaged result made
again) with an injected clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from executor import ClaimSettings, claim_once
from steps.shard_reuse import CLAIMS_DIR
from tests.steps.test_incremental_shards import (SHARDS, _shard_docs, assert_same_bytes, run_step, tokenize_step,
                                                 write_corpus)

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = Path(__file__).with_name("grow_experiment.py")


def runner(prefix: Path, corpus: str, tokenizer: str, sidefx: Path, **extra: str) -> subprocess.Popen:
    environ = {**os.environ, "GROW_CORPUS": corpus, "GROW_TOKENIZER": tokenizer, "GROW_SIDEFX": str(sidefx),
               "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **extra}
    return subprocess.Popen([sys.executable, str(EXPERIMENT), "--prefix", str(prefix), "--runner", "inline"],
                            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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
