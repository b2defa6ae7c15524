"""The dry run's shard forecast on buckets (fake GCS and the S3 emulator), whose manifests keep the
store's checksums (crc32c, an ETag), not sha256: an incremental step's run notes which sha256 each
store checksum of its inputs stands for (`shard-inputs.json`, steps/shard_reuse.py), and the dry run
translates the grown corpus's manifest through it; the forecast equals what the run then reuses.
The corpora: `shard_corpora` (tests/buckets/conftest.py)."""

from __future__ import annotations

import json

import pytest

import executor
from executor.engine.events import ShardsForecast
from executor.tools.dry_run import dry_run
from steps.shard_reuse import INPUTS_FILE
from tests.buckets.conftest import CORPUS_SHARDS as SHARDS
from tests.buckets.conftest import clean_environment, shard_corpora  # noqa: F401 (fixture)
from tests.buckets.test_incremental_shards_bucket import run_on
from tests.steps.test_shard_forecast_fuzzy import pipeline, with_tokenizer

pytestmark = pytest.mark.timeout(600)


def forecast_lines(bucket, steps) -> dict[str, str]:
    seen: list = []
    dry_run(steps, executor.Options(prefix=bucket.prefix, storage_options=bucket.options, runner="inline"),
            subscribers=[seen.append], environ=clean_environment())
    return dict(next((e for e in seen if isinstance(e, ShardsForecast)), ShardsForecast(())).lines)


def run_all(bucket, steps) -> executor.RunResult:
    result = executor.run(steps, prefix=bucket.prefix, runner="inline", storage_options=bucket.options,
                          environ=clean_environment())
    result.raise_on_failure()
    return result


def test_the_forecast_on_a_bucket_equals_what_the_run_reuses(shard_corpora, bucket):  # noqa: F811
    corpora = shard_corpora
    first, grown = (with_tokenizer(pipeline(corpora[n]), corpora) for n in ("first", "grown"))
    run_all(bucket, first[1:])  # the three steps in one run (each its own run proves nothing more)
    corpus_out, _ = run_on(bucket, grown[0])  # the upstream has written the grown corpus
    record = json.loads(bucket.fs().cat_file(f"{corpus_out}/.executor/record.json"))
    assert {e["checksum"]["algorithm"] for e in record["manifest"]} & {"crc32c", "s3-etag-md5"}  # no sha256 here
    said = forecast_lines(bucket, grown[1:])
    for step in grown[1:]:
        assert said[step.name] == f"expects to reuse {SHARDS - 2} of {SHARDS} shards (2 to process)", said
    made = run_all(bucket, grown[1:])
    for step in grown[1:]:
        result = executor.load_result(step, prefix=bucket.prefix, storage_options=bucket.options,
                                      environ=clean_environment())
        assert (result["shards_reused"], result["shards_processed"]) == (SHARDS - 2, 2), step.name
        assert bucket.fs().exists(f"{made.output_path(step)}/{INPUTS_FILE}")


def test_earlier_outputs_without_noted_checksums_are_not_forecast(shard_corpora, bucket):  # noqa: F811
    """An earlier output made before runs noted their inputs' checksums: the dry run says it cannot tell."""
    corpora = shard_corpora
    first, grown = (pipeline(corpora[n]) for n in ("first", "grown"))
    out, _ = run_on(bucket, first[1])
    bucket.fs().rm(f"{out}/{INPUTS_FILE}")
    run_on(bucket, grown[0])
    said = forecast_lines(bucket, grown[1:2])["fuzzy-deduped"]
    assert said.startswith("not forecast: the upstream manifest holds the store's checksums, not sha256"), said
    assert INPUTS_FILE in said
