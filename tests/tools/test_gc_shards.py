"""gc and shard results (executor/tools/gc.py, steps/shard_reuse.py): after a corpus was tokenized
and then grown, collecting with only the grown output reachable deletes the first output and the
claims of the shard results only it held (the changed and the removed shard's); the claims of every
result the grown output holds are kept, a RUNNING claim is never deleted, and a later run still
reuses every kept result."""

from __future__ import annotations

import json
import time
from pathlib import Path

from executor.core.record import Owner, State, Status
from executor.engine.prefix.prefixes import open_prefix
from executor.tools import gc
from steps import shard_reuse
from tests.steps.test_incremental_shards import SHARDS, _shard_docs, corpora, run_step, tokenize_step, write_corpus  # noqa: F401
from tests.tools.toy import run_main


def claims(prefix: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (prefix / shard_reuse.CLAIMS_DIR / "tokenized").glob("*.json")}


def held(output: str) -> set[str]:
    return {p.stem for p in (Path(output) / shard_reuse.INDEX_DIR).glob("*.json")}


def test_gc_keeps_the_shard_results_a_live_output_holds_and_collects_the_rest(corpora, tmp_path):
    assert (gc.SHARD_INDEX, gc.SHARD_CLAIMS) == (shard_reuse.INDEX_DIR, shard_reuse.CLAIMS_DIR)
    prefix = tmp_path / "prefix"
    first, _ = run_step(tokenize_step(corpora["first"], corpora["tokenizer"]), prefix)
    grown, _ = run_step(tokenize_step(corpora["grown"], corpora["tokenizer"]), prefix)
    made = claims(prefix)
    assert len(made) == SHARDS + 2  # the first run's 16, the grown run's 2 (the changed and the added shard)
    only_first = held(first) - held(grown)
    assert len(only_first) == 2 and only_first <= set(made)  # the changed shard's old result, the removed one's
    live = "f" * 64  # a claim some runner holds right now
    (prefix / shard_reuse.CLAIMS_DIR / "tokenized" / f"{live}.json").write_bytes(
        Status(State.RUNNING, live, "tokenized", 0, 1, Owner("r", "h", 1, ""), time.time()).to_bytes())

    report = gc.collect(open_prefix(str(prefix)), {Path(grown).name: "the grown corpus"})
    assert [o.rel for o in report.garbage] == [Path(first).name]
    assert sorted(c.address for c in report.claims) == sorted(only_first | {live})
    gc.sweep(report, open_prefix(str(prefix)), grace_hours=0, now=time.time() + 60)
    assert report.deleted == [Path(first).name] and not Path(first).exists()
    assert sorted(Path(rel).stem for rel in report.deleted_claims) == sorted(only_first)
    assert report.spared_claims == {f"{shard_reuse.CLAIMS_DIR}/tokenized/{live}.json": "RUNNING: a live lease (never deleted)"}
    assert set(claims(prefix)) == held(grown) | {live}

    more = write_corpus(tmp_path / "more", _grown_plus_one(corpora["grown"]))
    _, result = run_step(tokenize_step(more, corpora["tokenizer"]), prefix)
    assert (result["shards_processed"], result["shards_reused"]) == (1, SHARDS)  # every kept result reused


def _grown_plus_one(grown: str) -> dict[str, list[dict]]:
    from steps.documents import read_documents

    shards = {p.name.removesuffix(".jsonl.zst"): list(read_documents(str(p), "error"))
              for p in sorted(Path(grown).glob("*.jsonl.zst"))}
    shards["part-00099"] = _shard_docs(99)
    return shards


def test_the_gc_command_counts_and_deletes_the_claims(corpora, tmp_path, toy):
    prefix = tmp_path / "prefix"  # the toy experiment reaches none of its outputs
    run_step(tokenize_step(corpora["first"], corpora["tokenizer"]), prefix)
    code, out = run_main("gc", "--prefix", str(prefix), "--delete", "--grace-hours", "0", str(toy.path))
    assert "shard claims: 0 held by reachable outputs, 16 not" in out, out
    assert "deleted 16 shard claim(s); kept 0" in out, out
    assert claims(prefix) == {}
