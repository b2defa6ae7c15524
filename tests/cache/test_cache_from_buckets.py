"""--cache-from across endpoints and protocols (issue 30): a source on one moto S3 server and the
prefix on a second, each with keys of its own, given as one storage-options object keyed by
location; and from a bucket to a local prefix. Every copied file is checked against the source's
manifest (moto's ETag: an MD5), and `verify` is clean on the copies."""

from __future__ import annotations

import json

import pytest

import executor
from executor.core.locations import Storage
from executor.engine.prefix import location
from executor.tools.verify import verify_path
from executor.engine.prefix.prefixes import open_prefix
from tests.cache.graph import build
from tests.emulators import gcs_emulator, running_s3_server_process, s3_emulator  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def two_endpoints():
    """(first, second): bucket `cachea` on the first server only, `cacheb` on the second only."""
    with running_s3_server_process("cachea") as first, running_s3_server_process("cacheb") as second:
        yield first, second


@pytest.fixture(scope="module")
def keyed(two_endpoints) -> dict:
    first, second = two_endpoints
    return {"s3://cachea": first.storage_options, "s3://cacheb": second.storage_options}


@pytest.fixture(scope="module")
def source_prefix(keyed) -> str:
    prefix = "s3://cachea/a"
    result = executor.run(build(), prefix=prefix, runner="inline", storage_options=keyed, environ={})
    assert result.ok and all(s.ran_here for s in result.steps)
    return prefix


def records(prefix: str, keyed: dict) -> dict[str, dict]:
    fs, root = location.url_to_fs(prefix, Storage(keyed))
    return {json.loads(fs.cat_file(p))["name"]: json.loads(fs.cat_file(p))
            for p in fs.glob(f"{root}/cache/*/.executor/record.json")}


def test_copies_between_two_s3_endpoints_with_their_own_keys(source_prefix, keyed, two_endpoints):
    prefix = "s3://cacheb/b"
    result = executor.run(build(), prefix=prefix, runner="inline", storage_options=keyed,
                          cache_from=(source_prefix,), environ={})
    assert result.ok
    assert {s.name: (s.decision, s.ran_here) for s in result.steps} == {
        "cache/report": ("copy", False), "cache/notes": ("copy", False)}
    copied = records(prefix, keyed)
    assert {r["extra"]["copied_from"]["prefix"] for r in copied.values()} == {source_prefix}
    assert {e["checksum"]["algorithm"] for r in copied.values() for e in r["manifest"]} == {"s3-etag-md5"}
    checked = verify_path(open_prefix(prefix, keyed))
    assert len(checked) == 2 and all(v.ok for v in checked), [v.render() for v in checked]
    with pytest.raises(Exception):  # the first endpoint's keys do not open the second's bucket: routing mattered
        location.url_to_fs(prefix, Storage({"s3://": two_endpoints[0].storage_options}))[0].ls(prefix)


def test_a_changed_object_in_the_bucket_makes_that_step_run(keyed, tmp_path):
    source = "s3://cachea/damaged"
    assert executor.run(build(), prefix=source, runner="inline", storage_options=keyed, environ={}).ok
    fs, root = location.url_to_fs(source, Storage(keyed))
    [notes] = fs.glob(f"{root}/cache/notes-*/a.txt")
    fs.pipe_file(notes, b"a.txt: abd\n")  # same size, one byte changed
    result = executor.run(build(), prefix=str(tmp_path / "local"), runner="inline", storage_options=keyed,
                          cache_from=(source,), environ={})  # bucket -> local disk
    assert result.ok
    assert {s.name: s.ran_here for s in result.steps} == {"cache/report": False, "cache/notes": True}
    assert all(v.ok for v in verify_path(open_prefix(str(tmp_path / "local"))))


def test_copies_from_gcs_to_s3_checking_the_gcs_checksums(gcs_emulator, s3_emulator):  # noqa: F811
    """Across protocols: a GCS source (fake-gcs-server; its manifest holds GCS's own checksums) and
    an S3 prefix, each with its options in one keyed object."""
    keyed = {"gs://": gcs_emulator.storage_options, "s3://": s3_emulator.storage_options}
    source, prefix = gcs_emulator.fresh_prefix("cache-a"), s3_emulator.fresh_prefix("cache-b")
    assert executor.run(build(), prefix=source, runner="inline", storage_options=keyed, environ={}).ok
    algorithms = {e["checksum"]["algorithm"] for r in records(source, keyed).values() for e in r["manifest"]}
    assert algorithms <= {"crc32c", "md5-base64"} and algorithms, algorithms
    result = executor.run(build(), prefix=prefix, runner="inline", storage_options=keyed,
                          cache_from=(source,), environ={})
    assert result.ok and {(s.decision, s.ran_here) for s in result.steps} == {("copy", False)}
    assert {r["extra"]["copied_from"]["prefix"] for r in records(prefix, keyed).values()} == {source}
    checked = verify_path(open_prefix(prefix, keyed))
    assert len(checked) == 2 and all(v.ok for v in checked), [v.render() for v in checked]
