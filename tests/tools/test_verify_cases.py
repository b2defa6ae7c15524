"""verify, case by case on a local prefix: what each kind of step directory gives (not completed,
not SUCCESS, unreadable status or record, no record, a record of another digest, adopted), what each
problem says, and each checksum algorithm a manifest may name."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import fsspec
import pytest

from executor.core.record import Owner, State, Status, record_key, status_key
from executor.engine.prefix import outputs
from executor.tools.verify import Problem, current_checksum, step_directories, verify_path
from executor.engine.prefix.prefixes import open_prefix

from .test_verify import _completed_step
from .toy import run_main

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
    _completed_step(str(prefix), {}, "s/lowerdigest-000000000009", {"c.txt": b"c"})  # sorts below the status's
    record = json.loads((prefix / record_key("s/lowerdigest-000000000009")).read_text())
    (prefix / record_key("s/lowerdigest-000000000009")).write_text(json.dumps({**record, "digest": "0" * 64}))
    _completed_step(str(prefix), {}, "s/badrecord-000000000008", {"d.txt": b"d"})
    (prefix / record_key("s/badrecord-000000000008")).write_text("{not json")
    _completed_step(str(prefix), {}, "s/nopath-00000000000a", {"e.txt": b"e"})
    record = json.loads((prefix / record_key("s/nopath-00000000000a")).read_text())
    (prefix / record_key("s/nopath-00000000000a")).write_text(json.dumps({**record, "manifest": [{"size": 1}]}))
    (prefix / "runs").mkdir()
    (prefix / "runs/.executor").mkdir()  # history is no step, whatever it holds
    (prefix / "runs/.executor/status.json").write_text("{}")

    results = _by_path(verify_path(open_prefix(str(prefix))))
    assert sorted(results) == ["s/badrecord-000000000008", "s/failed-000000000004", "s/good-000000000001",
                               "s/lowerdigest-000000000009", "s/nopath-00000000000a", "s/norecord-000000000006",
                               "s/otherdigest-000000000007", "s/running-000000000003", "s/torn-000000000005",
                               "s/unfinished-000000000002"]
    good = results["s/good-000000000001"]
    assert good.ok and good.verified and good.files == 2 and good.step_id == "s/good-000000000001"
    assert results["s/unfinished-000000000002"].note == "no status.json: not a completed step; skipped"
    for name, state in (("s/running-000000000003", "RUNNING"), ("s/failed-000000000004", "FAILED")):
        assert results[name].note == f"status is {state}; nothing to verify" and results[name].ok
        assert results[name].step_id == name and not results[name].verified
    for result in results.values():
        assert result.files == (2 if result is good else 0), result.path  # only a verified step counts files
    for name, kind, file in (("s/torn-000000000005", "unverifiable", ".executor/status.json"),
                             ("s/norecord-000000000006", "missing", ".executor/record.json"),
                             ("s/otherdigest-000000000007", "changed", ".executor/record.json"),
                             ("s/lowerdigest-000000000009", "changed", ".executor/record.json"),
                             ("s/badrecord-000000000008", "unverifiable", ".executor/record.json"),
                             ("s/nopath-00000000000a", "unverifiable", ".executor/record.json")):
        result = results[name]
        assert [(p.kind, p.file) for p in result.problems] == [(kind, file)], name
        assert not result.ok and not result.verified
    assert results["s/norecord-000000000006"].problems[0].detail == "SUCCESS without a record"
    assert results["s/otherdigest-000000000007"].problems[0].detail == (
        f"record digest {'e' * 12}… does not match the status digest {'d' * 12}…")
    assert "status.json" in results["s/torn-000000000005"].problems[0].detail
    assert "manifest entry 0 names no path" in results["s/nopath-00000000000a"].problems[0].detail


def test_each_problem_with_a_file_says_what_changed(tmp_path):
    prefix = tmp_path / "p"
    path = Path(_completed_step(str(prefix), {}, "s/x-000000000001",
                                {"gone.txt": b"12345", "short.txt": b"1234567890", "same.txt": b"abc"}))
    (path / "gone.txt").unlink()
    (path / "short.txt").write_bytes(b"123456789")
    (path / "same.txt").write_bytes(b"abd")
    (path / "new.bin").write_bytes(b"xy")
    (path / "newdir").mkdir()  # an empty folder is no file
    [result] = verify_path(open_prefix(str(path)))
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


# What a step committed, what happened to its files since (bytes written, None: deleted), and what verify says.
FILE_CASES = {
    "a file that grew": ({"a.txt": b"abc"}, {"a.txt": b"abcde"}, [("changed", "a.txt", "size 3 -> 5 bytes")]),
    "unchanged files of every size": ({"empty": b"", "small": b"x", "big": b"y" * 1000}, {}, []),
    "an empty extra file": ({"a.txt": b"a"}, {"new": b""}, [("extra", "new", "0 bytes, not in the manifest")]),
    "hidden files, recorded and extra": ({".keep": b"k", "a.txt": b"a"}, {".keep": None, ".DS_Store": b"ds"},
                                         [("missing", ".keep", "recorded 1 bytes"),
                                          ("extra", ".DS_Store", "2 bytes, not in the manifest")]),
    "a size change, then files after it": ({"a.txt": b"a", "b.txt": b"b", "c.txt": b"c"},
                                           {"a.txt": b"aa", "b.txt": None, "c.txt": b"C"},
                                           [("changed", "a.txt", "size 1 -> 2 bytes"),
                                            ("missing", "b.txt", "recorded 1 bytes"),
                                            ("changed", "c.txt", f"sha256 {hashlib.sha256(b'c').hexdigest()[:16]}… -> "
                                                                 f"{hashlib.sha256(b'C').hexdigest()[:16]}…")]),
}


@pytest.mark.parametrize("case", FILE_CASES)
def test_what_verify_says_of_each_file(tmp_path, case):
    committed, since, expected = FILE_CASES[case]
    path = Path(_completed_step(str(tmp_path / "p"), {}, "s/x-000000000001", committed))
    for name, data in since.items():
        (path / name).unlink() if data is None else (path / name).write_bytes(data)
    [result] = verify_path(open_prefix(str(path)))
    assert [(p.kind, p.file, p.detail) for p in result.problems] == expected
    assert result.files == len(committed) and result.verified


def test_an_adopted_step_is_verified_through_the_output_it_points_at(tmp_path):
    prefix = tmp_path / "p"
    source = Path(_completed_step(str(prefix), {}, "s/old-000000000001", {"a.txt": b"aaa"}))
    _status(prefix, "s/new-000000000002", State.SUCCESS,
            alias_of={"step_id": "s/old-000000000001", "output_rel": "s/old-000000000001"})
    [adopted] = verify_path(open_prefix(str(prefix / "s/new-000000000002")))
    assert adopted.path == str(source) and adopted.ok and adopted.files == 1
    assert adopted.note == "adopted by s/new-000000000002; verified the output it points at"
    (source / "a.txt").unlink()
    [adopted] = verify_path(open_prefix(str(prefix / "s/new-000000000002")))
    assert [(p.kind, p.file) for p in adopted.problems] == [("missing", "a.txt")]


OLD, NEW, OLDER = "s/old-000000000001", "s/new-000000000002", "s/older-000000000003"


def _delete_old(prefix: Path) -> None:
    shutil.rmtree(prefix / OLD)


def _adopt_old(prefix: Path) -> None:
    _status(prefix, OLD, State.SUCCESS, alias_of={"step_id": OLDER, "output_rel": OLDER})


def _run_old_again(prefix: Path) -> None:
    _status(prefix, OLD, State.RUNNING)


def _tear_old_status(prefix: Path) -> None:
    (prefix / status_key(OLD)).write_bytes(b'{"state": "SUC')


# NEW is adopted from `points_at` (adopt writes OLD, a completed output), which then has something done to it;
# verifying NEW says: where it looked, its problems (kind, file, how the detail starts) and its note.
ADOPTED_CASES = {
    "a completed output": (OLD, None, OLD, [], f"adopted by {NEW}; verified the output it points at"),
    "a deleted output": (OLD, _delete_old, NEW, [("missing", OLD, "the output it was adopted from: no status.json")],
                         None),
    "an adopted output": (OLD, _adopt_old, NEW, [("unverifiable", ".executor/status.json", f"adopted from {OLD}, "
                                                  f"itself adopted from {OLDER}: adoption is one hop; adopt again with "
                                                  f"--from {OLDER}")], None),
    "itself": (NEW, None, NEW, [("unverifiable", ".executor/status.json", f"adopted from {NEW}, itself adopted")],
               None),
    "an output running again": (OLD, _run_old_again, OLD, [], f"adopted by {NEW}; the output it points at: status is "
                                                               "RUNNING; nothing to verify"),
    "a torn status": (OLD, _tear_old_status, OLD, [("unverifiable", ".executor/status.json", "")],
                      f"adopted by {NEW}; the output it points at: see its problems"),
}


@pytest.mark.parametrize("case", ADOPTED_CASES)
def test_what_verify_says_of_an_adopted_step_by_what_it_points_at(tmp_path, case):
    points_at, change, looked_at, problems, note = ADOPTED_CASES[case]
    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, OLD, {"a.txt": b"aaa"})
    _status(prefix, NEW, State.SUCCESS, alias_of={"step_id": points_at, "output_rel": points_at})
    if change:
        change(prefix)
    [result] = verify_path(open_prefix(str(prefix / NEW)))
    assert result.path == str(prefix / looked_at) and result.note == note
    assert [(p.kind, p.file) for p in result.problems] == [(kind, file) for kind, file, _ in problems]
    assert all(p.detail.startswith(detail) for p, (_, _, detail) in zip(result.problems, problems)), result.problems
    assert result.verified == (change is None and points_at == OLD)  # files compared only through one hop
    code, out = run_main("verify", str(prefix / NEW))
    assert code == (1 if problems else 0), out  # the command says so too


def test_a_relative_path_is_verified_from_the_working_directory(tmp_path, monkeypatch):
    _completed_step(str(tmp_path / "p"), {}, "s/x-000000000001", {"a.txt": b"a"})
    monkeypatch.chdir(tmp_path)
    for path in ("p", "./p/", "p/s/x-000000000001"):
        [result] = verify_path(open_prefix(path))
        assert result.path == str(tmp_path / "p/s/x-000000000001") and result.verified and result.ok, path


def test_verify_reads_only_and_says_the_same_each_time(tmp_path):
    prefix = tmp_path / "p"
    path = Path(_completed_step(str(prefix), {}, "s/x-000000000001", {"a.txt": b"a", "b.txt": b"b"}))
    (path / "a.txt").write_bytes(b"A")
    (path / "c.txt").write_bytes(b"c")

    def tree() -> dict:
        return {f: (f.is_file() and f.read_bytes(), f.stat().st_mtime_ns) for f in prefix.rglob("*")}

    before = tree()
    runs = [{p for r in verify_path(open_prefix(str(prefix))) for p in r.problems} for _ in range(2)]  # problems are values
    assert runs[0] == runs[1] == {Problem("changed", "a.txt", f"sha256 {hashlib.sha256(b'a').hexdigest()[:16]}… -> "
                                                              f"{hashlib.sha256(b'A').hexdigest()[:16]}…"),
                                  Problem("extra", "c.txt", "1 bytes, not in the manifest")}
    assert tree() == before  # nothing written, touched or added


def test_a_large_file_is_hashed_and_reported_in_pieces_of_one_mib(tmp_path):
    data = bytes(range(256)) * (10 << 10)  # 2.5 MiB
    (tmp_path / "f").write_bytes(data)
    seen: list[int] = []
    assert current_checksum(fsspec.filesystem("file"), str(tmp_path / "f"), {}, "sha256",
                            seen.append) == hashlib.sha256(data).hexdigest()
    assert seen == [1 << 20, 1 << 20, 1 << 19]  # memory stays bounded; progress moves within one file


def test_progress_counts_the_bytes_hashed_and_the_steps_done(tmp_path, capsys, monkeypatch):
    import executor.tools.verify
    from executor.engine.worker.progress import Progress

    monkeypatch.setattr(executor.tools.verify, "Progress", functools.partial(Progress, interval=0))  # every update
    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, "s/a-000000000001", {"a.txt": b"abc", "b.txt": b"de"})
    _completed_step(str(prefix), {}, "s/b-000000000002", {"c.txt": b"f"})
    assert all(r.ok for r in verify_path(open_prefix(str(prefix))))
    lines = capsys.readouterr().err.splitlines()
    shown = [re.match(r"\[verify \((\d+) B hashed\)\] (\d+)/2 steps", line).groups() for line in lines]
    assert shown == [("3", "0"), ("5", "0"), ("5", "1"), ("6", "1"), ("6", "2")], lines  # a line per update


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
    assert current_checksum(fs, path, {"etag": '"abc"'}, "s3-etag-md5") == "abc"  # as some listings spell it
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


def _edit_manifest_entry(prefix: Path, step_id: str, **fields) -> None:
    """Set (or, given None, drop) fields of the first manifest entry of a step's record."""
    record_path = prefix / record_key(step_id)
    record = json.loads(record_path.read_text())
    entry = record["manifest"][0]
    for key, value in fields.items():
        entry.pop(key) if value is None else entry.update({key: value})
    record_path.write_text(json.dumps(record))


# Names on each side of the known ones ("blake2b" < "crc32c" < "md4" < "md5-base64" < "s3-etag-md5" <
# "sha256" < "sha512" < "xxh64"), and no checksum at all: none is mistaken for a known algorithm.
@pytest.mark.parametrize("checksum,algorithm", [({"algorithm": "md4", "value": "00"}, "md4"),
                                                ({"algorithm": "blake2b", "value": "00"}, "blake2b"),
                                                ({"algorithm": "sha512", "value": "00"}, "sha512"),
                                                ({"algorithm": "xxh64", "value": "00"}, "xxh64"),
                                                (None, "?")])
def test_a_checksum_that_cannot_be_computed_here_is_unverifiable_not_changed(tmp_path, checksum, algorithm):
    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, "s/x-000000000001", {"a.txt": b"aaa"})
    _edit_manifest_entry(prefix, "s/x-000000000001", checksum=checksum)
    [result] = verify_path(open_prefix(str(prefix)))
    assert [(p.kind, p.file, p.detail) for p in result.problems] == [
        ("unverifiable", "a.txt", f"cannot compute a {algorithm} checksum here")]


def test_a_crc32c_checksum_without_google_crc32c_installed_is_unverifiable(tmp_path, monkeypatch):
    import google_crc32c

    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, "s/x-000000000001", {"a.txt": b"aaa"})
    value = base64.b64encode(google_crc32c.Checksum(b"aaa").digest()).decode()
    _edit_manifest_entry(prefix, "s/x-000000000001", checksum={"algorithm": "crc32c", "value": value})
    assert verify_path(open_prefix(str(prefix)))[0].ok  # computed here: the local listing carries no crc32c
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # what `import` finds where it is not installed
    [result] = verify_path(open_prefix(str(prefix)))
    assert [(p.kind, p.file, p.detail) for p in result.problems] == [
        ("unverifiable", "a.txt", "cannot compute a crc32c checksum here")]


@pytest.mark.parametrize("data", [b"", b"x"])
def test_a_manifest_entry_without_a_size_is_changed_whatever_the_file_holds(tmp_path, data):
    prefix = tmp_path / "p"
    _completed_step(str(prefix), {}, "s/x-000000000001", {"a.txt": data})
    _edit_manifest_entry(prefix, "s/x-000000000001", size=None)  # the checksum still matches
    [result] = verify_path(open_prefix(str(prefix)))
    assert [(p.kind, p.file, p.detail) for p in result.problems] == [
        ("changed", "a.txt", f"size None -> {len(data)} bytes")]


@pytest.mark.parametrize("missing", [True, False])
def test_a_prefix_that_holds_nothing_verifies_nothing(tmp_path, missing):
    prefix = tmp_path / "empty"
    if not missing:
        prefix.mkdir()
    assert verify_path(open_prefix(str(prefix))) == []
    assert outputs.is_local(str(prefix))
