"""Two runners growing the same corpus at once hash and write each new shard of exact dedup once
(steps/dedup/exact.py: both per-shard stages under shard claims, steps/shard_reuse.py): real runner
subprocesses on one prefix, each shard's hashing and writing counted by evidence files
(tests/steps/grow_exact_experiment.py), and the grown output byte-identical to a full run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from steps.shard_reuse import CLAIMS_DIR
from tests.steps.test_incremental_shards import (SHARDS, _shard_docs, assert_same_bytes, dedup_step, run_step,
                                                 write_corpus)

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = Path(__file__).with_name("grow_exact_experiment.py")


def runner(prefix: Path, corpus: str, sidefx: Path, **extra: str) -> subprocess.Popen:
    environ = {**os.environ, "GROW_CORPUS": corpus, "GROW_SIDEFX": str(sidefx), "PYTHONUNBUFFERED": "1",
               "COLUMNS": "200", **extra}
    return subprocess.Popen([sys.executable, str(EXPERIMENT), "--prefix", str(prefix), "--runner", "inline"],
                            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def made(sidefx: Path, kind: str) -> Counter:
    """How many times each shard was hashed or written (evidence files), then forget them."""
    paths = list(sidefx.glob(f"{kind}-*"))
    for path in paths:
        path.unlink()
    return Counter("-".join(p.name.split("-")[1:3]) for p in paths)


@pytest.fixture(scope="module")
def growing(tmp_path_factory) -> dict[str, str]:
    """`first`: 16 shards; `a`: those and 4 new ones; `b`: the same 20 in another folder (another
    step id) and one more that only b has. A new shard's documents copy an earlier shard's, so
    every written shard has removals to apply."""
    root = tmp_path_factory.mktemp("growing-exact")
    first = {f"part-{i:05d}": _shard_docs(i) for i in range(SHARDS)}
    a = {**first, **{f"part-{i:05d}": _shard_docs(i) for i in range(SHARDS, SHARDS + 4)}}
    b = {**a, f"part-{SHARDS + 4:05d}": _shard_docs(SHARDS + 4)}
    return {"first": write_corpus(root / "first", first), "a": write_corpus(root / "a", a),
            "b": write_corpus(root / "b", b)}


@pytest.mark.timeout(300)
def test_two_runners_growing_the_same_corpus_hash_and_write_each_new_shard_once(growing, tmp_path):
    prefix, sidefx, barrier = tmp_path / "prefix", tmp_path / "sidefx", tmp_path / "barrier"
    sidefx.mkdir()
    barrier.mkdir()
    first = runner(prefix, growing["first"], sidefx)
    assert first.wait(timeout=180) == 0, first.stdout.read()
    every = Counter({f"part-{i:05d}": 1 for i in range(SHARDS)})
    assert (made(sidefx, "hash"), made(sidefx, "write")) == (every, every)
    # both runners meet at the barrier, then reach the new shards together; each hash and write takes 0.5 s more
    racers = [runner(prefix, growing[name], sidefx, GROW_BARRIER=str(barrier), GROW_PEERS="2", GROW_SLEEP_S="0.5")
              for name in ("a", "b")]
    outs = [r.communicate(timeout=240)[0] for r in racers]
    assert [r.returncode for r in racers] == [0, 0], outs
    new = Counter({f"part-{i:05d}": 1 for i in range(SHARDS, SHARDS + 5)})
    assert made(sidefx, "hash") == new, outs
    assert made(sidefx, "write") == new, outs  # the 4 shared new shards once, b's own once
    results = {json.loads(p.read_text())["config"]["input_path"]: json.loads(p.read_text())["result"]
               for p in prefix.glob("deduped-*/.executor/record.json")}
    grown = [results[growing["a"]], results[growing["b"]]]
    assert sum(r["shards_rewritten"] for r in grown) == 5
    claims = [json.loads(p.read_text()) for p in (prefix / CLAIMS_DIR / "deduped").glob("*.json")]
    assert len(claims) == 2 * (SHARDS + 5) and {c["state"] for c in claims} == {"SUCCESS"}  # hash and write
    assert {c["attempt"] for c in claims} == {1}  # one claim each, ended by its maker: nobody took one over
    for name in ("a", "b"):
        grown_out = next(p for p in prefix.glob("deduped-*")
                         if json.loads((p / ".executor/record.json").read_text())["config"]["input_path"]
                         == growing[name])
        full, _ = run_step(dedup_step(growing[name]), tmp_path / f"full-{name}")
        assert_same_bytes(str(grown_out), full)
