"""Region-aware reads: a step reading a bucket in another location than the prefix's bucket gets a
note in the plan (with its size), and the run refuses above the budget until it is raised. S3
(moto keeps each bucket's region) carries the two locations; GCS is checked for the location read."""

from __future__ import annotations

import json
import uuid

import pytest

from executor.core.locations import Storage
from executor.engine.prefix import location
from executor.engine.transfers.regions import bucket_location
from tests.emulators import S3_FAKE_CREDENTIALS, S3_REGION, gcs_emulator, s3_emulator  # noqa: F401  (session fixtures)
from tests.tools.toy import run_file

EXPERIMENT = '''\
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, this_output_path
from executor.engine.prefix.location import open_file


@dataclass(frozen=True)
class CopyConfig:
    source: str
    output_path: str


def copy(config):
    with open_file(config.source, "rb") as src, open_file(config.output_path + "/copy.bin", "wb") as dst:
        dst.write(src.read())


if __name__ == "__main__":
    executor_main(steps=[ExecutorStep("r/copy", copy, CopyConfig(SOURCE, this_output_path()))])
'''


def write_experiment(tmp_path, source: str):
    path = tmp_path / "cross.py"
    path.write_text(EXPERIMENT.replace("SOURCE", repr(source)))
    return path


@pytest.fixture
def eu_object(s3_emulator, monkeypatch):
    """A 3 kB object in a bucket created in eu-west-1 (the emulator's own bucket is in us-west-2)."""
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(s3_emulator.storage_options))
    import botocore.session

    bucket = f"eu-{uuid.uuid4().hex[:10]}"
    client = botocore.session.get_session().create_client(  # a client of that region, as S3 requires
        "s3", endpoint_url=s3_emulator.endpoint_url, region_name="eu-west-1",
        aws_access_key_id=S3_FAKE_CREDENTIALS["key"], aws_secret_access_key=S3_FAKE_CREDENTIALS["secret"])
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    client.put_object(Bucket=bucket, Key="data.bin", Body=b"x" * 3000)
    return f"s3://{bucket}/data.bin"


def test_a_read_from_another_region_is_noted_refused_over_budget_then_allowed(eu_object, s3_emulator, tmp_path):
    path, prefix = write_experiment(tmp_path, eu_object), s3_emulator.fresh_prefix("regions")
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--dry-run")
    assert code == 0, out
    note = f"r/copy reads {eu_object} (0.00 GB) from EU-WEST-1; the prefix is in {S3_REGION.upper()}"
    assert note in out.replace("\n", " ")

    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--transfer-budget-gb", "0.000002")
    assert code == 2, out
    assert "transfers of 2.9 KiB exceed the budget of 2e-06 GB (cross-region reads 2.9 KiB (r/copy)); nothing " \
        "was started" in \
        out.replace("\n", " ")
    fs, root = location.url_to_fs(prefix, **s3_emulator.storage_options)
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/runs")  # refused before the run file

    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--transfer-budget-gb", "0.00001")
    assert code == 0, out
    assert note in out.replace("\n", " ")
    fs.invalidate_cache()
    [copied] = [p for p in fs.find(root) if p.endswith("/copy.bin")]
    assert fs.cat_file(copied) == b"x" * 3000


def test_the_default_budget_is_ten_gigabytes():  # one budget: cross-region reads, copies, mirrored inputs
    from executor import api
    from executor.cli import ExecutorOptions

    assert ExecutorOptions().transfer_budget_gb == api.Options().transfer_budget_gb == 10.0


def test_same_location_reads_say_nothing_on_gcs(gcs_emulator, tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(gcs_emulator.storage_options))
    fs, _ = location.url_to_fs("gs://x", **gcs_emulator.storage_options)
    other = f"other-{uuid.uuid4().hex[:10]}"
    fs.mkdir(other)
    fs.pipe_file(f"{other}/data.bin", b"y" * 100)
    prefix = gcs_emulator.fresh_prefix("regions")
    storage = Storage({"gs://": gcs_emulator.storage_options})  # what a run holds
    assert bucket_location(prefix, storage) == bucket_location(f"gs://{other}/data.bin", storage) == "US-CENTRAL1"
    code, out = run_file(write_experiment(tmp_path, f"gs://{other}/data.bin"), "--prefix", prefix,
                         "--runner", "inline", "--transfer-budget-gb", "0")
    assert code == 0, out
    assert "cross-region" not in out


TWO_STEPS = EXPERIMENT.replace('''    executor_main(steps=[ExecutorStep("r/copy", copy, CopyConfig(SOURCE, this_output_path()))])''', '''\
    made = ExecutorStep("r/made", make, MadeConfig(this_output_path()))
    executor_main(steps=[made, ExecutorStep("r/copy", copy, CopyConfig(SOURCE, this_output_path()))])''').replace(
    '''def copy(config):''', '''@dataclass(frozen=True)
class MadeConfig:
    output_path: str


def make(config):
    with open_file(config.output_path + "/made.bin", "wb") as dst:
        dst.write(b"m" * 5000)


def copy(config):''')


def test_cross_region_reads_are_reserved_before_cache_copies_which_give_way(eu_object, s3_emulator, tmp_path):
    """The budget (6 kB) holds the step's 3 kB cross-region read, not that read and a 5 kB cache copy
    too: the read is reserved first (the step cannot run without it), the copy is not made and its
    step runs here instead, with the sizes in its reason; the run is not refused."""
    path = tmp_path / "two.py"
    path.write_text(TWO_STEPS.replace("SOURCE", repr(eu_object)))
    source = tmp_path / "a"
    code, out = run_file(path, "--prefix", str(source), "--runner", "inline", "--only", "r/made")
    assert code == 0, out
    prefix = s3_emulator.fresh_prefix("reserved")
    args = ("--prefix", prefix, "--runner", "inline", "--cache-from", str(source), "--transfer-budget-gb", "0.000006")
    code, out = run_file(path, *args, "--dry-run")
    flat = " ".join(out.split())
    assert code == 0 and "a run would be refused" not in flat, out
    assert "not copied: 4.9 KiB from" in flat and "2.9 KiB of it for mirrored inputs and cross-region reads" in flat, out
    code, out = run_file(path, *args)
    assert code == 0, out
    flat = " ".join(out.split())
    assert "2/2 step(s) succeeded, 2 ran here" in flat, out
