"""Two runners growing the same corpus at once compute each new shard's MinHash band keys once (fuzzy
dedup's per-shard stage under steps/shard_reuse.py's claims): real runner subprocesses on one prefix
(tests/steps/grow_fuzzy_experiment.py), each shard's computation counted by evidence files, and the
output equal to a fresh full run's. The corpus is tests/steps/test_incremental_fuzzy.py's (near and
exact copies across shards)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def runner(prefix: Path, corpus: str, sidefx: Path, **extra: str) -> subprocess.Popen:
    environ = {**os.environ, "GROW_CORPUS": corpus, "GROW_SIDEFX": str(sidefx), "PYTHONUNBUFFERED": "1",
               "COLUMNS": "200", **extra}
    return subprocess.Popen([sys.executable, str(EXPERIMENT), "--prefix", str(prefix), "--runner", "inline"],
                            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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
def test_two_runners_growing_the_same_corpus_compute_each_new_shards_band_keys_once(growing, tmp_path):
    prefix, sidefx, barrier = tmp_path / "prefix", tmp_path / "sidefx", tmp_path / "barrier"
    sidefx.mkdir()
    barrier.mkdir()
    first = runner(prefix, growing["first"], sidefx)
    assert first.wait(timeout=180) == 0, first.stdout.read()
    assert made(sidefx) == Counter({f"part-{i:05d}": 1 for i in range(SHARDS)})
    # both runners meet at the barrier, then reach the new shards together; each computation takes 0.5 s more
    racers = [runner(prefix, growing[name], sidefx, GROW_BARRIER=str(barrier), GROW_PEERS="2", GROW_SLEEP_S="0.5")
              for name in ("a", "b")]
    outs = [r.communicate(timeout=240)[0] for r in racers]
    assert [r.returncode for r in racers] == [0, 0], outs
    assert made(sidefx) == Counter({f"part-{i:05d}": 1 for i in range(SHARDS, SHARDS + 5)}), outs
    grown = [json.loads((_output_of(prefix, growing[n]) / ".executor/record.json").read_text())["result"]
             for n in ("a", "b")]
    assert sum(r["shards_processed"] for r in grown) == 5  # the 4 shared new shards once, b's own once
    assert [r["shards_processed"] + r["shards_reused"] for r in grown] == [SHARDS + 4, SHARDS + 5]
    claims = [json.loads(p.read_text()) for p in (prefix / CLAIMS_DIR / "fuzzy-deduped").glob("*.json")]
    assert len(claims) == SHARDS + 5 and {c["state"] for c in claims} == {"SUCCESS"}
    assert {c["attempt"] for c in claims} == {1}  # one claim each, ended by its maker: nobody took one over
    for name in ("a", "b"):  # each output is a fresh full run's, kept set and canonical copies included
        full, fresh = run_step(fuzzy_step(growing[name]), tmp_path / f"full-{name}")
        assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS + 4 + (name == "b"), 0)
        assert_same_bytes(str(_output_of(prefix, growing[name])), full)
