"""Two runners growing the same corpus at once compute each new shard's MinHash band keys once and
write each new shard's kept documents once (fuzzy dedup's two per-shard stages under
steps/shard_reuse.py's claims), and a restart after a SIGKILL mid-write takes the killed runner's write
claims over at once: real runner subprocesses on one prefix (tests/steps/grow_fuzzy_experiment.py),
each shard's computation and write counted by evidence files, and the output equal to a fresh full
run's. The corpus is tests/steps/test_incremental_fuzzy.py's (near and exact copies across shards)."""

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

from steps.documents import write_documents
from steps.shard_reuse import CLAIMS_DIR
from tests.steps.test_incremental_fuzzy import _shard, fuzzy_step
from tests.steps.test_incremental_shards import SHARDS, assert_same_bytes, run_step
from tests.steps.test_shard_claims import made

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = Path(__file__).with_name("grow_fuzzy_experiment.py")


def runner(prefix: Path, corpus: str, sidefx: Path, *flags: str, **extra: str) -> subprocess.Popen:
    environ = {**os.environ, "GROW_CORPUS": corpus, "GROW_SIDEFX": str(sidefx), "PYTHONUNBUFFERED": "1",
               "COLUMNS": "200", **extra}
    return subprocess.Popen([sys.executable, str(EXPERIMENT), "--prefix", str(prefix), "--runner", "inline", *flags],
                            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def written(sidefx: Path) -> Counter:
    """How many times each shard was written, not resumed (evidence files), then forget them."""
    paths = list(sidefx.glob("write-*"))
    for path in paths:
        path.unlink()
    return Counter("-".join(p.name.split("-")[1:3]) for p in paths)


@pytest.fixture(scope="module")
def growing(tmp_path_factory) -> dict[str, str]:
    """`first`: 16 shards; `a`: those and 4 new ones; `b`: the same 20 in another folder (another
    step id) and one more that only b has."""
    root = tmp_path_factory.mktemp("growing-fuzzy")
    first = {f"part-{i:05d}": _shard(i) for i in range(SHARDS)}
    a = {**first, **{f"part-{i:05d}": _shard(i) for i in range(SHARDS, SHARDS + 4)}}
    b = {**a, f"part-{SHARDS + 4:05d}": _shard(SHARDS + 4)}
    for name, shards in (("first", first), ("a", a), ("b", b)):
        for shard, docs in shards.items():
            write_documents(str(root / name / f"{shard}.jsonl.zst"), docs)
    return {name: str(root / name) for name in ("first", "a", "b")}


def _output_of(prefix: Path, corpus: str) -> Path:
    return next(p for p in prefix.glob("fuzzy-deduped-*")
                if json.loads((p / ".executor/record.json").read_text())["config"]["input_path"] == corpus)


@pytest.mark.timeout(300)
def test_two_runners_growing_the_same_corpus_compute_and_write_each_new_shard_once(growing, tmp_path):
    prefix, sidefx, barrier = tmp_path / "prefix", tmp_path / "sidefx", tmp_path / "barrier"
    sidefx.mkdir()
    barrier.mkdir()
    first = runner(prefix, growing["first"], sidefx)
    assert first.wait(timeout=180) == 0, first.stdout.read()
    every = Counter({f"part-{i:05d}": 1 for i in range(SHARDS)})
    assert (made(sidefx), written(sidefx)) == (every, every)
    # both runners meet at the barrier, then reach the new shards together; each computation and write takes 0.5 s more
    racers = [runner(prefix, growing[name], sidefx, GROW_BARRIER=str(barrier), GROW_PEERS="2", GROW_SLEEP_S="0.5")
              for name in ("a", "b")]
    outs = [r.communicate(timeout=240)[0] for r in racers]
    assert [r.returncode for r in racers] == [0, 0], outs
    new = Counter({f"part-{i:05d}": 1 for i in range(SHARDS, SHARDS + 5)})
    assert made(sidefx) == new, outs
    assert written(sidefx) == new, outs  # the first 16 copied from the first output (same attributes)
    grown = [json.loads((_output_of(prefix, growing[n]) / ".executor/record.json").read_text())["result"]
             for n in ("a", "b")]
    assert sum(r["shards_processed"] for r in grown) == 5  # the 4 shared new shards once, b's own once
    assert [r["shards_processed"] + r["shards_reused"] for r in grown] == [SHARDS + 4, SHARDS + 5]
    assert sum(r["shards_rewritten"] for r in grown) == 5
    claims = [json.loads(p.read_text()) for p in (prefix / CLAIMS_DIR / "fuzzy-deduped").glob("*.json")]
    assert len(claims) == 2 * (SHARDS + 5) and {c["state"] for c in claims} == {"SUCCESS"}  # band keys and write
    assert {c["attempt"] for c in claims} == {1}  # one claim each, ended by its maker: nobody took one over
    for name in ("a", "b"):  # each output is a fresh full run's, kept set and canonical copies included
        full, fresh = run_step(fuzzy_step(growing[name]), tmp_path / f"full-{name}")
        assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS + 4 + (name == "b"), 0)
        assert_same_bytes(str(_output_of(prefix, growing[name])), full)


CLAIM_TTL_S = 120  # far above what the restart needs, so finishing before it shows no claim was waited out


@pytest.mark.timeout(400)
def test_a_restart_after_a_kill_mid_write_writes_each_shard_once_without_waiting_the_claims_ttl(growing, tmp_path):
    """A runner SIGKILLed (with its step's child) while a shard's write is in flight leaves that write
    claim RUNNING. The restart takes the step's lease over (short TTL here) and the claim at once (its
    step lease moved on), not after the claim's TTL; shards the killed run wrote are not written again."""
    prefix, sidefx = tmp_path / "prefix", tmp_path / "sidefx"
    sidefx.mkdir()
    short_lease = ("--lease-ttl", "6", "--heartbeat-interval", "1")
    killed = runner(prefix, growing["a"], sidefx, *short_lease, GROW_CLAIM_TTL_S=str(CLAIM_TTL_S),
                    GROW_WRITES_FIRST="3", GROW_WRITE_SLEEP_S="600")  # 3 shards written, then one in flight
    deadline = time.monotonic() + 180
    while not list(sidefx.glob("started-*")):  # a write under its claim, asleep before writing
        assert killed.poll() is None and time.monotonic() < deadline, killed.stdout.read() if killed.poll() else "slow"
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    claims_dir = prefix / CLAIMS_DIR / "fuzzy-deduped"
    in_flight = [c for c in (json.loads(p.read_text()) for p in claims_dir.glob("*.json")) if c["state"] == "RUNNING"]
    assert in_flight, "no write claim was held when the runner was killed"
    before = written(sidefx)  # shards whose write the killed run finished
    assert len(before) >= 3, before
    started = time.monotonic()
    restart = runner(prefix, growing["a"], sidefx, *short_lease, GROW_CLAIM_TTL_S=str(CLAIM_TTL_S))
    out = restart.communicate(timeout=CLAIM_TTL_S * 2)[0]
    elapsed = time.monotonic() - started
    assert restart.returncode == 0, out
    assert elapsed < CLAIM_TTL_S * 0.75, f"the restart took {elapsed:.0f}s: it waited the claims' TTL\n{out}"
    assert before + written(sidefx) == Counter({f"part-{i:05d}": 1 for i in range(SHARDS + 4)}), out
    claims = [json.loads(p.read_text()) for p in claims_dir.glob("*.json")]
    assert len(claims) == 2 * (SHARDS + 4) and {c["state"] for c in claims} == {"SUCCESS"}
    assert sum(c["attempt"] == 2 for c in claims) == len(in_flight)  # taken over by the restart
    full, _ = run_step(fuzzy_step(growing["a"]), tmp_path / "full")
    assert_same_bytes(str(_output_of(prefix, growing["a"])), full)
