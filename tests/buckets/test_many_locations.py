"""Many locations in one run and in one process (issue 29): two S3-compatible endpoints, each a moto
server in a process of its own (its buckets exist there only) with keys of its own; options keyed
by location route every URL to its endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass

import pytest

import executor
from executor.core.locations import Storage
from executor.engine.prefix import location
from tests.buckets.conftest import REPO, clean_environment
from tests.emulators import Emulator, running_s3_server_process


@pytest.fixture(scope="module")
def endpoints():
    """(first, second): bucket `corpus` on the first endpoint only, `runs` on the second only."""
    with running_s3_server_process("corpus") as first, running_s3_server_process("runs") as second:
        yield first, second


def secrets_of(*emulators: Emulator) -> list[str]:
    return [e.storage_options[k] for e in emulators for k in ("key", "secret")]


def test_input_on_one_endpoint_and_prefix_on_another_on_the_ray_runner(endpoints, ray_head):
    """The driver joins the session's Ray head (tests/conftest.py `ray_head`, started with no
    credentials or endpoints in its environment: a cluster start saved), so the shard tasks'
    workers can reach either endpoint only through the options the step carries."""
    first, second = endpoints
    source = f"s3://corpus/in-{uuid.uuid4().hex[:8]}"
    texts = ["one two three", "four five", "six"]
    storage = Storage({"s3://corpus": first.storage_options, "s3://runs": second.storage_options})
    for i, text in enumerate(texts):
        with location.open_file(f"{source}/shard-{i}.txt", "w", storage=storage) as f:
            f.write(text)
    prefix = f"s3://runs/team-{uuid.uuid4().hex[:8]}"
    keyed = json.dumps({"s3://corpus": first.storage_options, "s3://runs": second.storage_options})
    done = subprocess.run([sys.executable, "tests/buckets/two_endpoints.py", "--source", source, "--shards", "3",
                           "--prefix", prefix, "--storage-options", keyed],
                          cwd=REPO, env=clean_environment(RAY_ADDRESS=ray_head.address), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"joining Ray cluster at {ray_head.address}" in done.stdout + done.stderr, done.stdout[-3000:]

    fs, root = location.url_to_fs(prefix, storage)
    objects = {path[len(root) + 1:]: fs.cat_file(path) for path in fs.find(root)}
    [report] = [data for path, data in objects.items() if path.endswith("/report.txt")]
    assert report == b"6 words in 3 shards\n"  # the input was read from the first endpoint, shard by shard
    assert any(path.startswith("runs/") for path in objects)  # the run file was written under the prefix
    for secret in secrets_of(first, second):  # neither endpoint's keys are stored, nor printed
        assert secret not in done.stdout + done.stderr
        leaked = [path for path, data in objects.items() if secret.encode() in data]
        assert not leaked, f"a key was stored under the prefix in {leaked}"
    with pytest.raises(FileNotFoundError):  # the second endpoint has no corpus bucket: routing mattered
        location.url_to_fs(source, Storage({"s3://": second.storage_options}))[0].ls(source)


@dataclass(frozen=True)
class WhereConfig:
    text: str
    output_path: str


def write_where(config: WhereConfig) -> dict:
    """A step: writes under its prefix, and says which endpoint its options name for it."""
    with executor.open_file(f"{config.output_path}/out.txt", "w") as f:
        f.write(config.text)
    return {"endpoint": executor.current_storage().options_for(config.output_path)["endpoint_url"]}


def test_two_prefixes_with_different_options_in_one_process_on_two_threads(endpoints):
    first, second = endpoints
    results: dict[str, object] = {}

    def one_run(emulator: Emulator, bucket: str) -> None:
        prefix = f"s3://{bucket}/threads-{uuid.uuid4().hex[:8]}"
        step = executor.ExecutorStep("where/write", write_where, WhereConfig(f"made on {bucket}",
                                                                             executor.this_output_path()))
        try:  # one object of options, as before: for the prefix's protocol, in this run only
            run = executor.run([step], prefix=prefix, runner="inline", storage_options=emulator.storage_options,
                               environ=clean_environment())
            run.raise_on_failure()
            results[bucket] = (executor.load_result(step, prefix=prefix, storage_options=emulator.storage_options),
                               run.output_path(step))
        except BaseException as e:  # noqa: BLE001 - reported on the test's thread
            results[bucket] = e

    threads = [threading.Thread(target=one_run, args=args) for args in ((first, "corpus"), (second, "runs"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for emulator, bucket in ((first, "corpus"), (second, "runs")):
        assert not isinstance(results[bucket], BaseException), results[bucket]
        returned, output = results[bucket]
        assert returned == {"endpoint": emulator.endpoint_url}
        with location.open_file(f"{output}/out.txt", "r", storage=Storage({"s3://": emulator.storage_options})) as f:
            assert f.read() == f"made on {bucket}"
