"""A bucket that cannot be used is one clear line within seconds (exit 2), and nothing is written:
no credentials, a wrong endpoint, a missing bucket, an option the backend does not take, bad JSON."""

from __future__ import annotations

import json
import socket

import pytest

from executor.__main__ import main as tools_main
from tests.buckets.conftest import Bucket, _AMBIENT, make_bucket, run_experiment


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once the socket closes


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr  # one line, no traceback
    return lines[0]


def refuse(bucket: Bucket, options: dict, *expected: str, prefix: str | None = None) -> None:
    broken = Bucket(bucket.scheme, prefix or bucket.prefix, options, None)
    line = error_line(run_experiment("hello.py", broken, "--runner", "inline"))
    assert broken.prefix in line, line
    for text in expected:
        assert text in line, line
    assert bucket.objects() == {}  # nothing written (read with the working options)


@pytest.fixture
def s3_bucket(s3_emulator) -> Bucket:
    return make_bucket(s3_emulator, "down")


@pytest.fixture
def gcs_bucket(gcs_emulator) -> Bucket:
    return make_bucket(gcs_emulator, "down")


def test_s3_without_credentials_names_what_to_set(s3_bucket):
    options = {k: v for k, v in s3_bucket.options.items() if k not in ("key", "secret")}
    refuse(s3_bucket, options, "no credentials", "key=", "--storage-options")


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_a_wrong_endpoint_names_endpoint_url(scheme, s3_bucket, gcs_bucket):
    bucket = s3_bucket if scheme == "s3" else gcs_bucket
    refuse(bucket, {**bucket.options, "endpoint_url": f"http://127.0.0.1:{closed_port()}"},
           "cannot reach", "endpoint_url")


def test_a_missing_bucket_is_named(gcs_bucket):
    prefix = "gs://no-such-bucket-for-stepgraph/x"
    refuse(gcs_bucket, gcs_bucket.options, "'no-such-bucket-for-stepgraph' does not exist", prefix=prefix)


def test_an_option_the_backend_does_not_take(s3_bucket):
    refuse(s3_bucket, {**s3_bucket.options, "endpoint": "http://typo"}, "storage options", "endpoint")


def test_malformed_json_in_the_flag_or_the_variable(s3_bucket, monkeypatch, capsys):
    result = run_experiment("hello.py", Bucket("s3", s3_bucket.prefix, {}, None), "--storage-options", "{oops")
    assert "--storage-options must be a JSON object" in error_line(result)
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", "[1]")
    assert tools_main(["ps", "--prefix", s3_bucket.prefix]) == 2
    assert "EXECUTOR_STORAGE_OPTIONS must be a JSON object, not list" in capsys.readouterr().err


def test_the_tools_refuse_an_unreachable_bucket_the_same_way(s3_bucket, capsys):
    options = json.dumps({**s3_bucket.options, "endpoint_url": f"http://127.0.0.1:{closed_port()}"})
    for command in (["ps", "--prefix", s3_bucket.prefix], ["verify", s3_bucket.prefix],
                    ["status", f"{s3_bucket.prefix}/hello/words-0d518b03df36"]):
        assert tools_main([command[0], "--storage-options", options, *command[1:]]) == 2
        err = capsys.readouterr().err
        assert "cannot reach" in err and "endpoint_url" in err, (command, err)


def test_an_endpoint_that_never_answers_is_given_up_on(s3_bucket):
    """A listener that accepts and stays silent (a firewall, a hung proxy): the probe's deadline,
    not botocore's minute-long read timeout, decides. Shortened here from the 10 s default."""
    from executor.core.errors import ExecutorError
    from executor.engine.prefix import location
    from executor.engine.store import open_store

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = open_store(s3_bucket.prefix, {**s3_bucket.options, "endpoint_url": endpoint})
        with pytest.raises(ExecutorError, match=r"no answer from s3://\S+ within 1s; check endpoint_url"):
            location.check_reachable(store, s3_bucket.prefix, timeout_s=1)


def test_connecting_is_bounded_too(tmp_path):
    """gcsfs looks for credentials while it connects, before any listing: with no network it asks the
    cloud's metadata server, ~20 s of retries (issue 47). The stated bound (docs/storage.md: within
    PROBE_DEADLINE_S of opening the prefix) covers connecting and the first listing together. Here the
    metadata server is a listener that never answers, each request given 60 s: unbounded, the command
    would take minutes; bounded, the deadline plus the interpreter's start."""
    import os
    import subprocess
    import sys
    import time

    from executor.engine.prefix.location import PROBE_DEADLINE_S

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        env = {**{k: v for k, v in os.environ.items() if k not in _AMBIENT},
               "GCE_METADATA_HOST": host, "GCE_METADATA_IP": host, "GCE_METADATA_TIMEOUT": "60"}
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "executor", "ps", "--prefix", "gs://unreachable-bucket/x",
                               "--storage-options", json.dumps({"token": "cloud"})], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=PROBE_DEADLINE_S + 50)
        took = time.monotonic() - started
    assert error_line(done) == (f"error: storage: no answer from gs://unreachable-bucket/x within "
                                f"{PROBE_DEADLINE_S:g}s; check endpoint_url and the credentials (key/secret, token) "
                                f"in the storage options (--storage-options JSON or EXECUTOR_STORAGE_OPTIONS) and "
                                f"the network. Nothing was written.")
    assert took < PROBE_DEADLINE_S + 30, took  # the start-up's share, generously: unbounded is >= 60 s
