"""Shard results from `--cache-from` prefixes (executor/engine/worker/shard_sources.py, steps/shard_reuse.py):
a grown corpus's tokenize in a new prefix takes the unchanged shards' results from the step's output
under a cache-from prefix (committed there, not tainted) and writes the same bytes as a fresh full
run; a tainted source, or one that never committed, is refused and every shard is made here."""

from __future__ import annotations

import json
from pathlib import Path

from executor.api import run
from executor.engine.store import open_store
from executor.tools.taint import taint_output
from tests.steps.test_incremental_shards import (SHARDS, assert_same_bytes, corpora, run_step,  # noqa: F401
                                                 tokenize_step)


def grown_with_cache_from(corpora, prefix: Path, source: Path) -> tuple[str, dict]:  # noqa: F811
    step = tokenize_step(corpora["grown"], corpora["tokenizer"])
    result = run([step], prefix=str(prefix), runner="inline", cache_from=(str(source),))
    result.raise_on_failure()
    out = result.step(step).output_path
    return out, json.loads((Path(out) / ".executor" / "record.json").read_text())["result"]


def test_a_grown_corpus_reuses_shard_results_from_a_cache_from_prefix(corpora, tmp_path):  # noqa: F811
    first, _ = run_step(tokenize_step(corpora["first"], corpora["tokenizer"]), tmp_path / "team")
    out, grown = grown_with_cache_from(corpora, tmp_path / "mine", tmp_path / "team")
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    full, _ = run_step(tokenize_step(corpora["grown"], corpora["tokenizer"]), tmp_path / "fresh")
    assert_same_bytes(out, full)
    assert Path(first).exists()  # the source is read, never changed


def test_a_tainted_or_uncommitted_source_is_refused(corpora, tmp_path):  # noqa: F811
    first, _ = run_step(tokenize_step(corpora["first"], corpora["tokenizer"]), tmp_path / "team")
    taint_output(open_store(str(tmp_path / "team")), Path(first).name, "taint", "bad tokenizer", by={"user": "ada"})
    _, grown = grown_with_cache_from(corpora, tmp_path / "mine", tmp_path / "team")
    assert (grown["shards_processed"], grown["shards_reused"]) == (SHARDS, 0)

    status = Path(first) / ".executor" / "status.json"  # untainted, but its status is not SUCCESS
    taint_output(open_store(str(tmp_path / "team")), Path(first).name, "untaint", "fixed", by={"user": "ada"})
    status.write_text(status.read_text().replace('"SUCCESS"', '"FAILED"'))
    _, again = grown_with_cache_from(corpora, tmp_path / "mine2", tmp_path / "team")
    assert (again["shards_processed"], again["shards_reused"]) == (SHARDS, 0)
    status.write_text(status.read_text().replace('"FAILED"', '"SUCCESS"'))  # committed and untainted: used
    _, used = grown_with_cache_from(corpora, tmp_path / "mine3", tmp_path / "team")
    assert (used["shards_processed"], used["shards_reused"]) == (2, SHARDS - 2)
