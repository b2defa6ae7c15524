"""verify, case by case on a local prefix: what each kind of step directory gives (not completed,
not SUCCESS, unreadable status or record, no record, a record of another digest, adopted), what each
problem says, and each checksum algorithm a manifest may name."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import fsspec
import pytest

from executor.core.record import Owner, State, Status, record_key, status_key
from executor.engine import outputs
from executor.tools.verify import Problem, current_checksum, step_directories, verify_path

from .test_verify import _completed_step

OWNER = Owner("r", "h", 1, "u")


def _status(prefix: Path, step_id: str, state: State, **fields) -> None:
    path = prefix / status_key(step_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(Status(state, "d" * 64, step_id, seq=1, attempt=1, owner=OWNER, written_at=1.0,
                            **fields).to_bytes())


def _by_path(results) -> dict[str, object]:
    return {r.path.rsplit("/", 2)[-2] + "/" + r.path.rsplit("/", 1)[-1]: r for r in results}


def test_each_kind_of_step_directory(tmp_path):
    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, "s/good-000000000001", {"a.txt": b"aaa", "sub/b.txt": b"bb"})
    (prefix / "s/unfinished-000000000002/.executor/logs").mkdir(parents=True)  # no status yet
    (prefix / "s/unfinished-000000000002/.executor/logs/attempt-1.log").write_text("...")
    _status(prefix, "s/running-000000000003", State.RUNNING)
    _status(prefix, "s/failed-000000000004", State.FAILED, error="boom")
    _status(prefix, "s/torn-000000000005", State.SUCCESS)
    torn = prefix / status_key("s/torn-000000000005")
    torn.write_bytes(torn.read_bytes()[:15])
    _status(prefix, "s/norecord-000000000006", State.SUCCESS)
    _completed_step(str(prefix), {}, "s/otherdigest-000000000007", {"c.txt": b"c"})
    record = json.loads((prefix / record_key("s/otherdigest-000000000007")).read_text())
    (prefix / record_key("s/otherdigest-000000000007")).write_text(json.dumps({**record, "digest": "e" * 64}))
    _completed_step(str(prefix), {}, "s/badrecord-000000000008", {"d.txt": b"d"})
    (prefix / record_key("s/badrecord-000000000008")).write_text("{not json")
    (prefix / "runs").mkdir()
    (prefix / "runs/.executor").mkdir()  # history is no step, whatever it holds
    (prefix / "runs/.executor/status.json").write_text("{}")

    results = _by_path(verify_path(str(prefix)))
    assert sorted(results) == ["s/badrecord-000000000008", "s/failed-000000000004", "s/good-000000000001",
                               "s/norecord-000000000006", "s/otherdigest-000000000007", "s/running-000000000003",
                               "s/torn-000000000005", "s/unfinished-000000000002"]
    good = results["s/good-000000000001"]
    assert good.ok and good.verified and good.files == 2 and good.step_id == "s/good-000000000001"
    assert results["s/unfinished-000000000002"].note == "no status.json: not a completed step; skipped"
    for name, state in (("s/running-000000000003", "RUNNING"), ("s/failed-000000000004", "FAILED")):
        assert results[name].note == f"status is {state}; nothing to verify" and results[name].ok
        assert results[name].step_id == name and not results[name].verified
    for name, kind, file in (("s/torn-000000000005", "unverifiable", ".executor/status.json"),
                             ("s/norecord-000000000006", "missing", ".executor/record.json"),
                             ("s/otherdigest-000000000007", "changed", ".executor/record.json"),
                             ("s/badrecord-000000000008", "unverifiable", ".executor/record.json")):
        result = results[name]
        assert [(p.kind, p.file) for p in result.problems] == [(kind, file)], name
        assert not result.ok and not result.verified
    assert results["s/norecord-000000000006"].problems[0].detail == "SUCCESS without a record"
    assert results["s/otherdigest-000000000007"].problems[0].detail == (
        f"record digest {'e' * 12}… does not match the status digest {'d' * 12}…")
    assert "status.json" in results["s/torn-000000000005"].problems[0].detail


def test_each_problem_with_a_file_says_what_changed(tmp_path):
    prefix = tmp_path / "p"
    path = Path(_completed_step(str(prefix), {}, "s/x-000000000001",
                                {"gone.txt": b"12345", "short.txt": b"1234567890", "same.txt": b"abc"}))
    (path / "gone.txt").unlink()
    (path / "short.txt").write_bytes(b"123456789")
    (path / "same.txt").write_bytes(b"abd")
    (path / "new.bin").write_bytes(b"xy")
    (path / "newdir").mkdir()  # an empty folder is no file
    [result] = verify_path(str(path))
    assert [(p.kind, p.file, p.detail) for p in result.problems] == [
        ("missing", "gone.txt", "recorded 5 bytes"),
        ("changed", "same.txt", f"sha256 {hashlib.sha256(b'abc').hexdigest()[:16]}… -> "
                                f"{hashlib.sha256(b'abd').hexdigest()[:16]}…"),
        ("changed", "short.txt", "size 10 -> 9 bytes"),
        ("extra", "new.bin", "2 bytes, not in the manifest")]
    assert result.files == 3
    assert [p.render() for p in result.problems][::3] == ["missing  gone.txt  (recorded 5 bytes)",
                                                          "extra    new.bin  (2 bytes, not in the manifest)"]
    assert Problem("missing", "f").render() == "missing  f"


def test_an_adopted_step_is_verified_through_the_output_it_points_at(tmp_path):
    prefix = tmp_path / "p"
    source = Path(_completed_step(str(prefix), {}, "s/old-000000000001", {"a.txt": b"aaa"}))
    _status(prefix, "s/new-000000000002", State.SUCCESS,
            alias_of={"step_id": "s/old-000000000001", "output_rel": "s/old-000000000001"})
    [adopted] = verify_path(str(prefix / "s/new-000000000002"))
    assert adopted.path == str(source) and adopted.ok and adopted.files == 1
    assert adopted.note == "adopted by s/new-000000000002; verified the output it points at"
    (source / "a.txt").unlink()
    [adopted] = verify_path(str(prefix / "s/new-000000000002"))
    assert [(p.kind, p.file) for p in adopted.problems] == [("missing", "a.txt")]


def test_step_directories_skip_history_and_mirrored_statuses(tmp_path):
    prefix = tmp_path / "p"
    for rel in ("a/one-1/.executor/status.json", "a/one-1/x.txt", "two-2/.executor/status.json",
                "runs/r1.json", "mirror/.executor/k/status.json", "mirror/data/f.txt", ".executor/status.json"):
        (prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (prefix / rel).write_text("{}")
    fs = fsspec.filesystem("file")
    assert step_directories(fs, str(prefix) + "/") == [str(prefix)]  # a step directory itself
    (prefix / ".executor/status.json").unlink()
    assert step_directories(fs, str(prefix)) == [f"{prefix}/a/one-1", f"{prefix}/two-2"]
    assert step_directories(fs, f"{prefix}/a/one-1/") == [f"{prefix}/a/one-1"]


def test_each_checksum_algorithm_is_computed_when_the_listing_does_not_carry_it(tmp_path):
    data = b"0123456789" * 1000
    (tmp_path / "f").write_bytes(data)
    fs, path = fsspec.filesystem("file"), str(tmp_path / "f")
    md5 = hashlib.md5(data)
    assert current_checksum(fs, path, {}, "sha256") == hashlib.sha256(data).hexdigest()
    assert current_checksum(fs, path, {"ETag": '"abc"'}, "s3-etag-md5") == "abc"  # the listing's ETag
    assert current_checksum(fs, path, {"ETag": '"abc-2"'}, "s3-etag-md5") == md5.hexdigest()  # multipart
    assert current_checksum(fs, path, {"etag": ""}, "s3-etag-md5") == md5.hexdigest()
    assert current_checksum(fs, path, {"md5Hash": "given"}, "md5-base64") == "given"
    assert current_checksum(fs, path, {}, "md5-base64") == base64.b64encode(md5.digest()).decode()
    assert current_checksum(fs, path, {"crc32c": "given"}, "crc32c") == "given"
    import google_crc32c

    assert current_checksum(fs, path, {}, "crc32c") == base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
    assert current_checksum(fs, path, {}, "md4") is None
    seen = []
    current_checksum(fs, path, {}, "sha256", seen.append)
    assert sum(seen) == len(data)  # every byte hashed is reported, for progress


def test_a_checksum_that_cannot_be_computed_here_is_unverifiable_not_changed(tmp_path):
    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, "s/x-000000000001", {"a.txt": b"aaa"})
    record_path = prefix / record_key("s/x-000000000001")
    record = json.loads(record_path.read_text())
    record["manifest"][0]["checksum"] = {"algorithm": "md4", "value": "00"}
    record_path.write_text(json.dumps(record))
    [result] = verify_path(str(prefix))
    assert [(p.kind, p.file, p.detail) for p in result.problems] == [
        ("unverifiable", "a.txt", "cannot compute a md4 checksum here")]


@pytest.mark.parametrize("missing", [True, False])
def test_a_prefix_that_holds_nothing_verifies_nothing(tmp_path, missing):
    prefix = tmp_path / "empty"
    if not missing:
        prefix.mkdir()
    assert verify_path(str(prefix)) == []
    assert outputs.is_local(str(prefix))
