"""verify: outputs checked against their manifests on a local prefix, on S3 (moto) and on GCS (fake-gcs-server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.engine.prefix import outputs
from executor.core.record import Owner, State, Status, StepRecord, record_key, status_key
from executor.tools.verify import verify_path, verify_step
from executor.engine.prefix.prefixes import open_prefix

from .toy import run_main


def _problems(results) -> set[tuple[str, str]]:
    return {(p.kind, p.file) for r in results for p in r.problems}


def test_verify_local_prefix_detects_deleted_modified_and_extra_files(ran_toy):
    code, out = run_main("verify", ran_toy.prefix)
    assert code == 0 and "4 step(s) verified, 0 problem(s)" in out, out

    raw = next(Path(ran_toy.prefix, "toy").glob("raw-*"))
    (raw / "shard-0.txt").unlink()
    text = (raw / "raw.txt").read_text()
    (raw / "raw.txt").write_text(text.replace("b", "B"))  # same size, other bytes
    (raw / "stray.bin").write_bytes(b"xx")
    code, out = run_main("verify", ran_toy.prefix)
    assert code == 1, out
    assert _problems(verify_path(open_prefix(ran_toy.prefix))) == {("missing", "shard-0.txt"), ("changed", "raw.txt"),
                                                      ("extra", "stray.bin")}
    assert "sha256" in out and "3 problem(s)" in out

    code, out = run_main("verify", str(next(Path(ran_toy.prefix, "toy").glob("train-*"))))
    assert code == 0 and "1 step(s) verified" in out  # one step on its own is fine


def _completed_step(prefix: str, options: dict, step_id: str, files: dict[str, bytes]) -> str:
    """A completed step written the way the executor writes one: files, manifest, record, status."""
    fs = outputs.filesystem(prefix, options)
    path = outputs.join(prefix, step_id)
    for name, data in files.items():
        fs.pipe_file(f"{path}/{name}", data)
    digest = "d" * 64
    record = StepRecord(step_id=step_id, digest=digest, name=step_id.rsplit("-", 1)[0], identity={}, config={},
                        dependencies=[], provenance={}, result=None, manifest=outputs.manifest(fs, path),
                        timings={}, attempt=1, run_id="r")
    fs.pipe_file(outputs.join(prefix, record_key(step_id)), record.to_bytes())
    status = Status(State.SUCCESS, digest, step_id, seq=1, attempt=1, owner=Owner("r", "h", 1, "u"), written_at=1.0)
    fs.pipe_file(outputs.join(prefix, status_key(step_id)), status.to_bytes())
    return path


@pytest.mark.parametrize("backend,algorithm", [("s3", "s3-etag-md5"), ("gcs", "crc32c")])
def test_verify_object_store_prefix_detects_deleted_and_modified_objects(backend, algorithm, request):
    emulator = request.getfixturevalue(f"{backend}_emulator")
    prefix = emulator.fresh_prefix("verify")
    options = dict(emulator.storage_options)
    path = _completed_step(prefix, options, "data/shards-0123456789ab",
                           {"a.bin": b"a" * 100, "b.bin": b"b" * 50, "sub/c.bin": b"c" * 10})
    record = json.loads(outputs.filesystem(prefix, options).cat_file(f"{path}/.executor/record.json"))
    assert {e["checksum"]["algorithm"] for e in record["manifest"]} == {algorithm}  # object metadata

    assert _problems(verify_path(open_prefix(prefix, options))) == set()
    fs = outputs.filesystem(prefix, options)
    fs.rm(f"{path}/b.bin")
    fs.pipe_file(f"{path}/a.bin", b"A" + b"a" * 99)  # same size: caught by the ETag
    assert _problems(verify_path(open_prefix(prefix, options))) == {("missing", "b.bin"), ("changed", "a.bin")}

    code, out = run_main("verify", path, "--storage-options", json.dumps(options))
    assert code == 1 and "missing  b.bin" in out and "changed  a.bin" in out, out


def test_verify_shows_progress_while_hashing(ran_toy, monkeypatch):
    import functools

    import executor.tools.verify
    from executor.engine.worker.progress import Progress

    monkeypatch.setattr(executor.tools.verify, "Progress", functools.partial(Progress, interval=0))  # every update
    code, out = run_main("verify", ran_toy.prefix)
    assert code == 0, out
    assert "[verify (" in out and " hashed)]" in out  # while a step's files are hashed
    assert "4/4 steps (100%)" in out


@pytest.mark.parametrize("backend", ["s3", "gcs"])
def test_verify_step_where_the_bucket_is_gone_reports_every_file_missing(backend, request):
    emulator = request.getfixturevalue(f"{backend}_emulator")
    options = dict(emulator.storage_options)
    fs = outputs.filesystem(emulator.fresh_prefix("verify"), options)
    record = {"step_id": "s/x-000000000001", "manifest": [
        {"path": "a.bin", "size": 1, "checksum": {"algorithm": "sha256", "value": "0" * 64}}]}
    gone = f"{backend if backend == 's3' else 'gs'}://no-such-bucket-stepgraph/s/x-000000000001"  # listing it fails
    result = verify_step(fs, gone, record)
    assert [(p.kind, p.file, p.detail) for p in result.problems] == [("missing", "a.bin", "recorded 1 bytes")]
