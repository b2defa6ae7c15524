"""The cross-region read guard fails closed or says why it could not tell (issues 30.2, 32): a bucket
whose location cannot be read is named with the error, never taken for "same region"; a read from
another region whose size cannot be listed is over any finite budget, never 0 bytes."""

from __future__ import annotations

import uuid

from tests.emulators import S3_REGION, s3_emulator  # noqa: F401  (session fixture)
from tests.executor.test_regions import eu_object, write_experiment  # noqa: F401  (fixture)
from tests.tools.toy import run_file


def test_an_unreadable_bucket_location_is_said_with_its_error_not_taken_for_the_same_region(
        s3_emulator, tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(s3_emulator.storage_options))
    missing = f"s3://no-such-{uuid.uuid4().hex[:10]}/data.bin"  # its metadata cannot be read
    prefix = s3_emulator.fresh_prefix("guard")
    code, out = run_file(write_experiment(tmp_path, missing), "--prefix", prefix, "--runner", "inline", "--dry-run")
    assert code == 0, out
    flat = " ".join(out.split())
    assert f"could not tell whether r/copy reading {missing} crosses regions" in flat, out
    bucket = missing.split("/")[2]
    assert f"the location of bucket {bucket} could not be read (FileNotFoundError: The specified bucket does " \
           "not exist)" in flat, out


def test_a_cross_region_read_of_unknown_size_is_refused_until_allowed(eu_object, s3_emulator, tmp_path):
    absent = eu_object.rsplit("/", 1)[0] + "/absent.bin"  # an eu-west-1 bucket; nothing at this key
    path, prefix = write_experiment(tmp_path, absent), s3_emulator.fresh_prefix("guard")
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--dry-run")
    assert code == 0 and "size unknown: nothing found at that path" in " ".join(out.split()), out
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline")  # default budget: 10 GB
    flat = " ".join(out.split())
    assert code == 2, out
    assert f"cross-region reads of unknown size: r/copy reads {absent} from EU-WEST-1 (nothing found at that path)" \
        in flat and "--transfer-budget-gb inf" in flat, out
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--transfer-budget-gb", "inf")
    assert "unknown size" not in out and code == 1, out  # allowed: the step runs (and fails: nothing to read)
    assert S3_REGION.upper() in " ".join(out.split())
