"""Mirrored inputs across buckets (issue 30.3): the corpus held by two moto S3 servers with keys of their
own (options keyed by location), the logical bucket reachable on neither. One run copies from the first
server's bucket onto a prefix on the second; another, from the second's onto a local prefix: the step's
id is the same (the logical URL's), each copy is checked against the ETags its server reported, and each
record names its own source. A GCS source (fake-gcs-server) gives the same id; an object rewritten after
planning drops its bucket for the next."""

from __future__ import annotations

import json

import pytest

import executor
from executor.core.locations import Storage
from executor.engine.prefix import location
from tests.cache.mirror_graph import FILES, build
from executor.engine.events import LogLine, PlanMade
from tests.emulators import gcs_emulator, running_s3_server_process  # noqa: F401  (session fixture)

LOGICAL = "s3://corpus-gone/raw/corpus"  # no such bucket on either server


@pytest.fixture(scope="module")
def servers():
    with running_s3_server_process("mirra") as first, running_s3_server_process("mirrb") as second:
        keyed = {"s3://corpus-gone": first.storage_options, "s3://mirra": first.storage_options,
                 "s3://mirrb": second.storage_options}
        for bucket in ("mirra", "mirrb"):
            fs, _ = location.url_to_fs(f"s3://{bucket}", Storage(keyed))
            for name, text in FILES.items():
                fs.pipe_file(f"{bucket}/copy/raw/corpus/{name}", text.encode())
        yield keyed


def mirror_record(prefix: str, keyed: dict) -> dict:
    fs, root = location.url_to_fs(prefix, Storage(keyed))
    return json.loads(fs.cat_file(f"{root}/mirror/.executor/corpus-gone/raw/corpus/record.json"))


def test_ids_are_equal_whichever_bucket_the_copy_came_from(servers, tmp_path):
    runs = {}
    for source, prefix in (("s3://mirra/copy", "s3://mirrb/runs"), ("s3://mirrb/copy", str(tmp_path / "local"))):
        result = executor.run(build(LOGICAL), prefix=prefix, runner="inline", storage_options=servers,
                              mirror_sources=(source,), environ={})
        assert result.ok, result.steps
        record = mirror_record(prefix, servers)
        assert record["source"] == f"{source}/raw/corpus"
        assert {e["checksum"]["algorithm"] for e in record["manifest"]} == {"s3-etag-md5"}
        counted = executor.load_result(build(LOGICAL)[0].config.count_path.step, prefix=prefix,
                                       storage_options=servers, environ={})
        assert counted["lines"] == 3000 and counted["read_from"] == f"{prefix}/mirror/corpus-gone/raw/corpus"
        runs[prefix] = {s.name: s.step_id for s in result.steps}
    first, second = runs.values()
    assert first == second, runs


def test_the_logical_bucket_that_cannot_be_listed_is_named_among_the_places_tried(servers, tmp_path):
    with pytest.raises(executor.ExecutorError) as caught:
        executor.plan(build(LOGICAL), prefix=str(tmp_path / "p"), storage_options=servers,
                      mirror_sources=("s3://mirra/elsewhere",), environ={})
    message = str(caught.value)
    assert f"mirrored input {LOGICAL}, read by mirrored/count (corpus), was found in no source" in message
    assert f"{LOGICAL} (" in message and "s3://mirra/elsewhere/raw/corpus (nothing there)" in message, message


def test_a_gcs_source_gives_the_same_id_its_checksums_checked(servers, gcs_emulator, tmp_path):  # noqa: F811
    """Across protocols: the corpus in a fake-gcs-server bucket (its crc32c / MD5 checked), the same id
    as the copies from S3."""
    source = gcs_emulator.fresh_prefix("mirror-src")
    keyed = {**servers, "gs://": gcs_emulator.storage_options}
    fs, root = location.url_to_fs(source, Storage(keyed))
    for name, text in FILES.items():
        fs.pipe_file(f"{root}/raw/corpus/{name}", text.encode())
    prefix = str(tmp_path / "p")
    result = executor.run(build(LOGICAL), prefix=prefix, runner="inline", storage_options=keyed,
                          mirror_sources=(source,), environ={})
    assert result.ok, result.steps
    record = mirror_record(prefix, keyed)
    assert record["source"] == f"{source}/raw/corpus"
    assert {e["checksum"]["algorithm"] for e in record["manifest"]} <= {"crc32c", "md5-base64"}
    s3_ids = {s.name: s.step_id for s in executor.plan(build(LOGICAL), prefix=str(tmp_path / "q"),
                                                       storage_options=keyed, mirror_sources=("s3://mirra/copy",),
                                                       environ={}).steps}
    assert {s.name: s.step_id for s in result.steps} == s3_ids


def test_an_object_changed_after_planning_is_refused_and_the_other_bucket_used(servers, tmp_path):
    """The first bucket's object is rewritten (same size) after the plan listed its ETag: that source is
    dropped, the copy comes from the second server's bucket."""
    fs, _ = location.url_to_fs("s3://mirra", Storage(servers))
    fs.pipe_file("mirra/changed/raw/corpus/part-0.txt", FILES["part-0.txt"].encode())
    fs.pipe_file("mirra/changed/raw/corpus/sub/part-1.txt", FILES["sub/part-1.txt"].encode())

    def rewrite_after_planning(event) -> None:
        if isinstance(event, PlanMade):
            fs.pipe_file("mirra/changed/raw/corpus/part-0.txt", FILES["part-0.txt"].upper().encode())

    prefix, events = str(tmp_path / "p"), []
    result = executor.run(build(LOGICAL), prefix=prefix, runner="inline", storage_options=servers, environ={},
                          mirror_sources=("s3://mirra/changed", "s3://mirrb/copy"),
                          subscribers=[rewrite_after_planning, events.append])
    assert result.ok, result.steps
    assert mirror_record(prefix, servers)["source"] == "s3://mirrb/copy/raw/corpus"
    warned = [e.text for e in events if isinstance(e, LogLine) and e.level == "warning"]
    assert any("not copied from s3://mirra/changed/raw/corpus: SourceRejected: part-0.txt: s3-etag-md5 differs"
               in w for w in warned), warned
