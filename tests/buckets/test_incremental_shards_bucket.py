"""Incremental tokenize and exact dedup on a bucket (the S3 emulator): the grown corpus's run finds the
earlier output under the bucket prefix, reuses its unchanged shards, and writes the same objects as
a fresh full run under another prefix. The corpora are tests/steps/test_incremental_shards.py's shards, fewer
of them (`shard_corpora`, tests/buckets/conftest.py)."""

from __future__ import annotations

import pytest

import executor
from tests.buckets.conftest import CORPUS_SHARDS as SHARDS
from tests.buckets.conftest import clean_environment, make_bucket, shard_corpora  # noqa: F401 (fixture)
from tests.steps.test_incremental_shards import dedup_step, tokenize_step

pytestmark = pytest.mark.timeout(600)


def upload(bucket, local: str, name: str) -> str:
    url = f"{bucket.prefix}/inputs/{name}"
    bucket.fs().put(local, url, recursive=True)
    return url


def output_objects(bucket, output: str) -> dict[str, bytes]:
    """Every object of an output but the executor's own records (only the output's objects are read)."""
    from executor.engine.prefix import location

    fs, root = bucket.fs(), location.bare_path(output)
    return {p[len(root) + 1:]: fs.cat_file(p) for p in fs.find(output) if "/.executor/" not in p[len(root):]}


def run_on(bucket, step) -> tuple[str, dict]:
    result = executor.run([step], prefix=bucket.prefix, runner="inline", storage_options=bucket.options,
                          environ=clean_environment())
    result.raise_on_failure()
    return result.output_path(step), executor.load_result(step, prefix=bucket.prefix,
                                                         storage_options=bucket.options,
                                                         environ=clean_environment())


@pytest.mark.parametrize("kind", ["tokenize", "tokenize_5_shards", "exact_dedup"])
def test_a_grown_corpus_on_a_bucket_reuses_unchanged_shards(kind, shard_corpora, s3_emulator):  # noqa: F811
    """tokenize_5_shards: num_output_shards=5, input files' results under by-file/ cut into 5 shards
    (token streams read by byte range)."""
    corpora = shard_corpora
    here, fresh = make_bucket(s3_emulator, "incr"), make_bucket(s3_emulator, "full")
    inputs = {b.prefix: {n: upload(b, corpora[n], n) for n in ("first", "grown")} for b in (here, fresh)}
    tokenizer = corpora["tokenizer"]
    make = {"tokenize": lambda c: tokenize_step(c, tokenizer),
            "tokenize_5_shards": lambda c: tokenize_step(c, tokenizer, num_output_shards=5)}.get(kind, dedup_step)
    run_on(here, make(inputs[here.prefix]["first"]))
    incremental, grown = run_on(here, make(inputs[here.prefix]["grown"]))
    full, _ = run_on(fresh, make(inputs[fresh.prefix]["grown"]))
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    got, want = output_objects(here, incremental), output_objects(fresh, full)
    assert sorted(got) == sorted(want) and len(want) > SHARDS
    assert [name for name in want if got[name] != want[name]] == []


def test_tokenize_grows_on_the_gcs_emulator_under_its_shard_claims(shard_corpora, gcs_emulator):  # noqa: F811
    """The same on fake GCS (generation preconditions): every shard made was claimed there (a
    SUCCESS claim under `.shard-claims/tokenized/`: the first run's CORPUS_SHARDS, the grown run's 2)."""
    import json

    corpora = shard_corpora
    here, fresh = make_bucket(gcs_emulator, "incr"), make_bucket(gcs_emulator, "full")
    inputs = {b.prefix: {n: upload(b, corpora[n], n) for n in ("first", "grown")} for b in (here, fresh)}
    run_on(here, tokenize_step(inputs[here.prefix]["first"], corpora["tokenizer"]))
    incremental, grown = run_on(here, tokenize_step(inputs[here.prefix]["grown"], corpora["tokenizer"]))
    full, _ = run_on(fresh, tokenize_step(inputs[fresh.prefix]["grown"], corpora["tokenizer"]))
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    got, want = output_objects(here, incremental), output_objects(fresh, full)
    assert sorted(got) == sorted(want) and [name for name in want if got[name] != want[name]] == []
    claims = {k: json.loads(v) for k, v in here.objects().items() if k.startswith(".shard-claims/tokenized/")}
    assert len(claims) == SHARDS + 2 and {c["state"] for c in claims.values()} == {"SUCCESS"}
