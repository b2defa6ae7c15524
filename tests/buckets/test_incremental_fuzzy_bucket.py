"""Incremental fuzzy dedup on a bucket (the S3 emulator): the grown corpus's run finds the earlier output
under the bucket prefix, reuses the band keys of its unchanged shards, and writes the same objects as
a fresh full run under another prefix. The corpora are tests/steps/test_incremental_fuzzy.py's shards,
fewer of them (10: shard 03 changed, 07 removed, 10 added; the near-copy family of shards 07 and 09
keeps its canonical copy in the removed shard)."""

from __future__ import annotations

import pytest

from steps.documents import write_documents
from tests.buckets.conftest import make_bucket
from tests.buckets.test_incremental_shards_bucket import output_objects, run_on, upload
from tests.steps.test_incremental_fuzzy import _shard, fuzzy_step
from tests.steps.test_incremental_shards import first_and_grown

pytestmark = pytest.mark.timeout(600)
SHARDS = 10


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fuzzy-bucket-corpora")
    first, grown = first_and_grown(_shard, SHARDS, 7, _shard(3, version="v2"))
    for name, shards in (("first", first), ("grown", grown)):
        for shard, docs in shards.items():
            write_documents(str(root / name / f"{shard}.jsonl.zst"), docs)
    return {name: str(root / name) for name in ("first", "grown")}


def test_a_grown_corpus_on_a_bucket_reuses_the_band_keys_of_unchanged_shards(corpora, s3_emulator):
    here, fresh = make_bucket(s3_emulator, "fuzzy-incr"), make_bucket(s3_emulator, "fuzzy-full")
    inputs = {b.prefix: {n: upload(b, corpora[n], n) for n in ("first", "grown")} for b in (here, fresh)}
    run_on(here, fuzzy_step(inputs[here.prefix]["first"]))
    incremental, grown = run_on(here, fuzzy_step(inputs[here.prefix]["grown"]))
    full, fresh_result = run_on(fresh, fuzzy_step(inputs[fresh.prefix]["grown"]))
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    assert (fresh_result["shards_processed"], fresh_result["shards_reused"]) == (SHARDS, 0)
    got, want = output_objects(here, incremental), output_objects(fresh, full)
    assert sorted(got) == sorted(want) and len([n for n in want if n.startswith("minhash/")]) == SHARDS
    assert [name for name in want if got[name] != want[name]] == []
    assert grown["duplicate_documents"] == fresh_result["duplicate_documents"] > 0
