"""Incremental fuzzy dedup (steps/dedup/fuzzy_reuse.py): a 16-shard corpus run, then one shard added,
one changed and one removed; the run under a new id computes signatures for the added and changed
shards only, buckets them with the stored ones, and its output (kept documents, attributes with the
canonical copy of each removed one, the stored band keys) is byte-identical to a fresh full run.
The corpus (accents, symbols, CJK) has near and exact copies across shards: between the changed or
the added shard and unchanged ones, and a family whose canonical copy was in the removed shard, so
the grown corpus's canonical copy moves to a document of a reused shard."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import zstandard

from executor import ExecutorStep, this_output_path
from steps.dedup import FuzzyDedupConfig, fuzzy_dedup
from steps.documents import write_documents
from tests.steps.test_incremental_shards import SHARDS, assert_same_bytes, files_of, first_and_grown, run_step

_VOCABULARY = ["café", "naïve", "straße", "über", "€20", "©", "→", "日本語", "中文", "한국어", "data", "shard",
               "token", "corpus", "grows", "dump"] + [f"w{i}" for i in range(300)]


def _text(key: str) -> str:
    rng = random.Random(key)
    return " ".join(rng.choice(_VOCABULARY) for _ in range(40))


def _near(text: str, mark: str) -> str:
    """A near copy: the last word changed (one shingle differs: Jaccard about 0.95)."""
    return text.rsplit(" ", 1)[0] + " " + mark


def _shard(i: int, version: str = "") -> list[dict]:
    docs = [{"id": f"s{i}-d{k}{version}", "text": _text(f"{i}-{k}{version}")} for k in range(12)]
    if i > 0:
        docs[0]["text"] = _near(_text(f"{i - 1}-5"), f"near{i}")  # of shard i-1's doc 5
    docs[1]["text"] = _text(f"{(i + 3) % SHARDS}-2")  # an exact copy of shard i+3's doc 2
    if i in (7, 9, 12):  # a family whose canonical copy is in shard 7, which the grown corpus lacks
        docs[6]["text"] = _near(_text("family"), f"member{i}")
    return docs


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, str]:
    """`first`: 16 shards; `grown`: shard 03 changed, 07 removed, a new shard 16 added."""
    root = tmp_path_factory.mktemp("fuzzy-corpora")
    first, grown = first_and_grown(_shard, SHARDS, 7, _shard(3, version="v2"))
    for name, shards in (("first", first), ("grown", grown)):
        for shard, docs in shards.items():
            write_documents(str(root / name / f"{shard}.jsonl.zst"), docs)
    return {name: str(root / name) for name in ("first", "grown")}


def fuzzy_step(corpus: str) -> ExecutorStep:
    return ExecutorStep("fuzzy-deduped", fuzzy_dedup, FuzzyDedupConfig(corpus, this_output_path()))


def removals(output: str) -> dict[str, tuple[str, float]]:
    """Removed document id -> (its canonical copy's id, Jaccard), from the attributes."""
    found = {}
    for path in sorted((Path(output) / "attributes").iterdir()):
        for line in zstandard.ZstdDecompressor().decompress(path.read_bytes(), max_output_size=1 << 26).splitlines():
            a = json.loads(line)
            found[a["id"]] = (a["duplicate_of"], a["jaccard"])
    return found


def test_a_grown_corpus_computes_signatures_of_its_new_and_changed_shards_only(corpora, tmp_path):  # noqa: F811
    first_out, first = run_step(fuzzy_step(corpora["first"]), tmp_path / "p")
    assert (first["shards_processed"], first["shards_reused"]) == (SHARDS, 0)
    incremental, grown = run_step(fuzzy_step(corpora["grown"]), tmp_path / "p")
    full, fresh = run_step(fuzzy_step(corpora["grown"]), tmp_path / "q")
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS, 0)
    assert_same_bytes(incremental, full)
    removed = removals(full)
    # the corpus means something: copies across shards, and near copies between the changed shard
    # and an unchanged (reused) one, whose canonical copy is the reused shard's document
    assert grown["duplicate_documents"] == fresh["duplicate_documents"] == len(removed)
    near = {member: canonical for member, (canonical, jaccard) in removed.items() if 0.8 <= jaccard < 1}
    assert near["s3-d0v2"] == "s2-d5"  # the changed shard's near copy of a reused shard's document
    assert near["s16-d0"] == "s15-d5"  # the added shard's
    assert near["s12-d6"] == "s9-d6"  # the canonical copy s7-d6 is gone: s9-d6 is canonical now
    assert "s9-d6" not in removed and "s8-d0" not in removed  # s8-d0's original was in shard 7
    assert removed["s16-d1"] == ("s0-d1", 1.0)  # an exact copy in the added shard of a reused one's
    assert removed["s6-d2"] == ("s3-d1v2", 1.0)  # a reused shard's document, now a copy of the changed one's
    # outputs of shards whose removals did not change are copied, not written again
    assert 2 <= grown["shards_rewritten"] < SHARDS - 2
    before = files_of(first_out)
    assert sorted(name for name in files_of(full) if name.startswith("minhash/")
                  and before.get(name) == files_of(full)[name]) == [
        f"minhash/part-{i:05d}.arrow" for i in range(SHARDS) if i not in (3, 7)]


def test_damaged_band_keys_are_recomputed_not_used(corpora, tmp_path):  # noqa: F811
    first_out, _ = run_step(fuzzy_step(corpora["first"]), tmp_path / "p")
    damaged = Path(first_out) / "minhash" / "part-00005.arrow"
    damaged.write_bytes(damaged.read_bytes()[:-2] + b"\0\1")
    incremental, grown = run_step(fuzzy_step(corpora["grown"]), tmp_path / "p")
    full, _ = run_step(fuzzy_step(corpora["grown"]), tmp_path / "q")
    assert (grown["shards_processed"], grown["shards_reused"]) == (3, SHARDS - 3)
    assert_same_bytes(incremental, full)


def test_fuzzy_shard_tasks_on_ray_reuse_the_same_way(ray_local, corpora, tmp_path):  # noqa: F811
    """Each minhash and write task looks up and copies its own result on a Ray worker; outputs named
    as the executor names them (`<name>-<12 hex>`), the step called in a Ray-connected driver."""
    from executor.engine.runner.ray_env import ray_is_active

    assert ray_is_active()
    p, q = tmp_path / "p", tmp_path / "q"
    fuzzy_dedup(FuzzyDedupConfig(corpora["first"], str(p / "fuzzy-000000000001")))
    grown = fuzzy_dedup(FuzzyDedupConfig(corpora["grown"], str(p / "fuzzy-000000000002")))
    fresh = fuzzy_dedup(FuzzyDedupConfig(corpora["grown"], str(q / "fuzzy-000000000002")))
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS, 0)
    assert_same_bytes(str(p / "fuzzy-000000000002"), str(q / "fuzzy-000000000002"))
