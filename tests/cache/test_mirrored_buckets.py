"""Mirrored inputs across buckets (issue 30.3): the corpus held by two moto S3 servers with keys of their
own (options keyed by location), the logical bucket reachable on neither. One run copies from the first
server's bucket onto a prefix on the second; another, from the second's onto a local prefix: the step's
id is the same (the logical URL's), each copy is checked against the ETags its server reported, and each
record names its own source."""

from __future__ import annotations

import json

import pytest

import executor
from executor.core.locations import Storage
from executor.engine import location
from tests.cache.mirror_graph import FILES, build
from tests.emulators import running_s3_server_process

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
