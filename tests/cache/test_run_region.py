"""Runs that know their region (issue 30.4): the runner's region (EXECUTOR_REGION) is compared with
the prefix bucket's location before anything runs; a mismatch is one line naming both and exit 2,
unless --allow-cross-region (which the run file's recorded command line keeps)."""

from __future__ import annotations

import json

import pytest

from executor.engine.prefix import location
from tests.emulators import S3_REGION, s3_emulator  # noqa: F401  (session fixture)
from tests.executor.test_regions import write_experiment
from tests.tools.toy import run_file


@pytest.fixture
def experiment(s3_emulator, tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(s3_emulator.storage_options))
    prefix = s3_emulator.fresh_prefix("region")
    source = f"{prefix}-input/data.bin"  # the prefix's own bucket: no cross-region read
    fs, path = location.url_to_fs(source, **s3_emulator.storage_options)
    fs.pipe_file(path, b"z" * 10)
    return write_experiment(tmp_path, source), prefix, fs


def test_a_runner_in_another_region_is_refused_until_allowed(experiment, monkeypatch):
    path, prefix, fs = experiment
    monkeypatch.setenv("EXECUTOR_REGION", "eu-west-1")
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline")
    flat = " ".join(out.split())
    assert code == 2, out
    assert (f"this runner is in eu-west-1 (EXECUTOR_REGION) and the prefix {prefix} is in {S3_REGION.upper()}: "
            "every read and write would cross regions; nothing was started") in flat and \
        "--allow-cross-region" in flat, out
    fs.invalidate_cache()
    assert not fs.exists(prefix.split("://", 1)[1])  # nothing written
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--allow-cross-region")
    assert code == 0 and "(allowed by --allow-cross-region)" in " ".join(out.split()), out
    fs.invalidate_cache()
    [run_file_path] = fs.glob(prefix.split("://", 1)[1] + "/runs/*.json")
    assert "--allow-cross-region" in fs.cat_file(run_file_path).decode()  # recorded


def test_a_runner_in_the_prefix_region_runs_without_a_word(experiment, monkeypatch):
    path, prefix, _ = experiment
    monkeypatch.setenv("EXECUTOR_REGION", S3_REGION)
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline")
    assert code == 0 and "region" not in out.replace(prefix, ""), out


def test_without_the_variable_the_metadata_servers_region_is_compared(experiment, monkeypatch):
    """The runner's region from its cloud's metadata server (EC2's here, on loopback) when
    EXECUTOR_REGION is not set: a mismatch names the server as its source."""
    from tests.cache.metadata_server import metadata_server

    path, prefix, _ = experiment
    monkeypatch.delenv("EXECUTOR_REGION", raising=False)
    with metadata_server(ec2_region="ap-south-1") as server:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://{server.address}")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
        code, out = run_file(path, "--prefix", prefix, "--runner", "inline")
        flat = " ".join(out.split())
        assert code == 2 and f"this runner is in ap-south-1 (the EC2 metadata server) and the prefix {prefix} is " \
            f"in {S3_REGION.upper()}" in flat, out
        server.ec2_region = S3_REGION
        code, out = run_file(path, "--prefix", prefix, "--runner", "inline")
        assert code == 0 and "region" not in out.replace(prefix, ""), out
