"""gc, case by case on a local prefix: which folders are step outputs and what each holds, what is
reachable and why, and what a sweep deletes or keeps (and says why)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from executor.core.record import Absent, Owner, State, Status, status_key
from executor.engine.prefix import location
from executor.tools.gc import _mtime, collect, list_outputs, reachable_outputs, sweep
from executor.engine.prefix.prefixes import open_prefix

HOUR = 3600.0


def _status(prefix: Path, rel: str, state: State, written_at: float = 1.0, mtime: float | None = None,
            **fields) -> None:
    path = prefix / status_key(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(Status(state, "d" * 64, rel.rsplit("/", 1)[-1], seq=1, attempt=1, owner=Owner("r", "h", 1, "u"),
                            written_at=written_at, **fields).to_bytes())
    mtime = written_at if mtime is None else mtime  # the listing's mtime and the status agree, as when written
    os.utime(path, (mtime, mtime))


def _file(prefix: Path, rel: str, size: int, mtime: float) -> None:
    path = prefix / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("info,seconds", [
    ({"mtime": 1700000000.5}, 1700000000.5),                                              # local
    ({"LastModified": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)}, 1704164645.0),  # S3
    ({"updated": "2024-01-02T03:04:05.000Z"}, 1704164645.0),                             # GCS
    ({"created": "2024-01-02T03:04:05+00:00"}, 1704164645.0),
    ({"updated": "yesterday"}, 0.0), ({}, 0.0), ({"mtime": None, "size": 3}, 0.0),
])
def test_a_files_last_write_is_read_from_whatever_the_listing_gives(info, seconds):
    assert _mtime(info) == seconds


def test_each_step_output_is_listed_with_its_own_files_size_and_newest_write(tmp_path):
    prefix = tmp_path / "p"
    _status(prefix, "a/one-1", State.SUCCESS, written_at=50.0)
    _file(prefix, "a/one-1/f1", 10, 100.0)
    _file(prefix, "a/one-1/sub/f2", 5, 300.0)
    _status(prefix, "a/one-1/inner-2", State.SUCCESS, written_at=900.0, mtime=150.0)  # inside another's folder
    _file(prefix, "a/one-1/inner-2/g", 7, 200.0)
    _file(prefix, "plain/h", 3, 100.0)  # no .executor/: not a step output
    _file(prefix, "runs/r.json", 4, 100.0)
    _status(prefix, "runs/old-3", State.SUCCESS)  # history, whatever it holds
    _status(prefix, "mirror", State.SUCCESS)  # mirrored inputs' statuses are no step's
    (prefix / "mirror/.executor/k").mkdir(parents=True)
    (prefix / "mirror/.executor/k/status.json").write_text("{}")
    _status(prefix, "", State.SUCCESS)  # the prefix itself is never an output to collect

    found = {o.rel: o for o in list_outputs(open_prefix(str(prefix)))}
    assert sorted(found) == ["a/one-1", "a/one-1/inner-2"]
    one, inner = found["a/one-1"], found["a/one-1/inner-2"]
    one_status = len((prefix / status_key("a/one-1")).read_bytes())
    inner_status = len((prefix / status_key("a/one-1/inner-2")).read_bytes())
    assert (one.files, one.size, one.newest_mtime) == (3, 15 + one_status, 300.0)
    assert (inner.files, inner.size, inner.newest_mtime) == (2, 7 + inner_status, 200.0)
    assert one.state is State.SUCCESS and one.status.written_at == 50.0
    assert one.last_written == 300.0  # the newer of the files and the status
    assert inner.last_written == 900.0  # its status says it was written later than any file's time
    assert list_outputs(open_prefix(str(tmp_path / "nothing-here"))) == []


def test_reachable_are_the_roots_the_pins_and_what_they_were_adopted_from(tmp_path):
    prefix = tmp_path / "p"
    _status(prefix, "a/new-2", State.SUCCESS, alias_of={"step_id": "a/old-1", "output_rel": "a/old-1"})
    _status(prefix, "a/old-1", State.SUCCESS)
    _status(prefix, "a/pinned-3", State.SUCCESS, alias_of={"step_id": "a/older-0", "output_rel": "a/older-0"})
    _status(prefix, "a/plain-4", State.SUCCESS, alias_of={"step_id": "x"})  # no output_rel: nothing more
    keep = reachable_outputs(open_prefix(str(prefix)), {"a/new-2": "step new of e.py", "a/plain-4": "step plain of e.py"},
                             ["/a/pinned-3/", "a/missing-5"])
    assert keep == {"a/new-2": "step new of e.py", "a/plain-4": "step plain of e.py", "a/pinned-3": "pinned",
                    "a/missing-5": "pinned", "a/old-1": "adopted by a/new-2", "a/older-0": "adopted by a/pinned-3"}
    keep = reachable_outputs(open_prefix(str(prefix)), {"a/old-1": "step old of e.py"}, ["a/old-1"])
    assert keep == {"a/old-1": "step old of e.py"}  # the first reason stays


def test_collect_parts_reachable_from_garbage_and_counts_its_bytes(tmp_path):
    prefix = tmp_path / "p"
    for rel, size in (("a/kept-1", 10), ("a/gone-2", 20), ("a/gone-3", 30)):
        _status(prefix, rel, State.SUCCESS)
        _file(prefix, f"{rel}/data", size, 100.0)
    report = collect(open_prefix(str(prefix)), {"a/kept-1": "root"})
    assert [o.rel for o in report.kept_present] == ["a/kept-1"]
    assert [o.rel for o in report.garbage] == ["a/gone-2", "a/gone-3"]
    assert report.garbage_bytes == sum(o.size for o in report.garbage) > 50
    assert report.reachable == {"a/kept-1": "root"}



def test_collect_prints_nothing_and_tells_its_caller_before_each_long_read(tmp_path, capfd):
    """The library reports, the command line prints: what it is about to read goes to `say` (the
    CLI's gc prints it), never to the process's stdout or stderr."""
    prefix = tmp_path / "p"
    for rel in ("a/kept-1", "a/gone-2"):
        _status(prefix, rel, State.SUCCESS)
    heard: list[str] = []
    report = collect(open_prefix(str(prefix)), roots={"a/kept-1": "root"}, pins=(), say=heard.append)
    assert [o.rel for o in report.garbage] == ["a/gone-2"]
    assert heard == [f"listing every object under {prefix}…", "reading 2 status(es)…"]
    assert [o.rel for o in list_outputs(opened=open_prefix(str(prefix)), say=heard.append)] == [
        "a/gone-2", "a/kept-1"]  # every argument by name, as the docstrings name them
    assert heard[2:] == heard[:2]
    collect(open_prefix(str(prefix)), {})  # nobody listening
    assert capfd.readouterr() == ("", "")

def test_a_sweep_deletes_old_garbage_and_says_why_it_keeps_the_rest(tmp_path):
    prefix = tmp_path / "p"
    now = 100 * HOUR
    _status(prefix, "a/old-1", State.SUCCESS, written_at=now - 48 * HOUR)
    _file(prefix, "a/old-1/data", 3, now - 48 * HOUR)
    _status(prefix, "a/young-2", State.SUCCESS, written_at=now - 2 * HOUR)
    _file(prefix, "a/young-2/data", 3, now - 30 * HOUR)
    _file(prefix, "a/nostatus-3/.executor/logs/attempt-1.log", 3, now - 48 * HOUR)
    _file(prefix, "a/nostatus-3/data", 3, now - 48 * HOUR)
    _status(prefix, "a/started-4", State.SUCCESS, written_at=now - 48 * HOUR)
    _file(prefix, "a/started-4/data", 3, now - 48 * HOUR)
    _file(prefix, "runs/r.json", 3, now - 48 * HOUR)
    report = collect(open_prefix(str(prefix)), {})
    assert [o.rel for o in report.garbage] == ["a/nostatus-3", "a/old-1", "a/started-4", "a/young-2"]
    assert report.garbage[0].state is Absent.NO_STATUS
    # a runner takes a/started-4 between the listing and the sweep: the re-read keeps it
    _status(prefix, "a/started-4", State.RUNNING, written_at=now - 48 * HOUR)

    sweep(report, open_prefix(str(prefix)), grace_hours=24, now=now)
    assert report.deleted == ["a/nostatus-3", "a/old-1"]
    assert report.spared == {"a/started-4": "RUNNING: a live lease (never deleted)",
                             "a/young-2": "written 2.0 h ago, within the 24 h grace period"}
    assert not (prefix / "a/old-1").exists() and not (prefix / "a/nostatus-3").exists()
    assert (prefix / "a/young-2/data").exists() and (prefix / status_key("a/started-4")).exists()
    assert (prefix / "runs/r.json").exists()


def test_the_grace_period_is_measured_from_the_last_write_exactly(tmp_path):
    prefix = tmp_path / "p"
    now = 100 * HOUR
    _status(prefix, "a/edge-1", State.SUCCESS, written_at=now - 24 * HOUR)
    _file(prefix, "a/edge-1/data", 3, now - 30 * HOUR)
    _status(prefix, "a/inside-2", State.SUCCESS, written_at=now - 23.5 * HOUR)
    _file(prefix, "a/inside-2/data", 3, now - 30 * HOUR)
    _status(prefix, "a/almost-0", State.SUCCESS, written_at=now - 24 * HOUR + 10)  # 10 s short of 24 h
    _file(prefix, "a/almost-0/data", 3, now - 30 * HOUR)
    report = sweep(collect(open_prefix(str(prefix)), {}), open_prefix(str(prefix)), grace_hours=24, now=now)
    assert report.deleted == ["a/edge-1"]  # exactly 24 h old: out of the grace period
    assert sorted(report.spared) == ["a/almost-0", "a/inside-2"]  # a/almost-0, kept first, stops nothing
    assert report.spared["a/inside-2"] == "written 23.5 h ago, within the 24 h grace period"


@pytest.mark.parametrize("rel,files,listed", [
    # rel, its files (path in the output, bytes, mtime), then what the listing says: files, bytes, newest write
    ("a/empty-1", [(".executor/logs/attempt-1.log", 0, 100.0), ("data", 0, 200.0)], (2, 0, 200.0)),
    ("top-2", [(".executor/logs/attempt-1.log", 3, 100.0), ("data", 4, 200.0)], (2, 7, 200.0)),  # no folder above
    # a time before 1970 reads like a missing one (0): as old as can be
    ("a/before-1970-3", [(".executor/logs/attempt-1.log", 3, -HOUR), ("data", 4, -2 * HOUR)], (2, 7, 0.0)),
], ids=["empty-files-count-0-bytes", "an-output-at-the-top-of-the-prefix", "a-time-before-1970"])
def test_what_the_listing_counts_for_an_output_without_a_status(tmp_path, rel, files, listed):
    prefix = tmp_path / "p"
    for name, size, mtime in files:
        _file(prefix, f"{rel}/{name}", size, mtime)
    [output] = list_outputs(open_prefix(str(prefix)))
    assert output.rel == rel and output.state is Absent.NO_STATUS
    assert (output.files, output.size, output.newest_mtime) == listed
    assert output.last_written == listed[2]  # no status to say later


@pytest.mark.parametrize("state", [State.SUCCESS, State.FAILED])
def test_a_deletion_takes_the_status_away_before_the_files(tmp_path, monkeypatch, state):
    """If the storage refuses to delete the files, no status is left saying the output is there;
    the refusal is reported, and the sweep goes on with the next output."""
    prefix = tmp_path / "p"
    for rel in ("a/old-1", "a/old-2"):
        _status(prefix, rel, state)
        _file(prefix, f"{rel}/data", 3, 1.0)
    report = collect(open_prefix(str(prefix)), {})
    fs_type = type(location.open_filesystem(str(prefix)))
    rm = fs_type.rm

    def refuse_the_first(self, path, recursive=False, maxdepth=None):
        if path.endswith("a/old-1"):
            raise PermissionError(f"storage refused to delete {path}")
        return rm(self, path, recursive=recursive, maxdepth=maxdepth)

    monkeypatch.setattr(fs_type, "rm", refuse_the_first)
    sweep(report, open_prefix(str(prefix)), grace_hours=0, now=10 * HOUR)
    assert report.failed == {"a/old-1": f"PermissionError: storage refused to delete {prefix}/a/old-1"}
    assert report.deleted == ["a/old-2"] and not (prefix / "a/old-2").exists()
    assert not (prefix / status_key("a/old-1")).exists()
    assert (prefix / "a/old-1/data").exists()


def test_a_sweep_takes_the_grace_period_and_the_time_by_name(tmp_path):
    """Both are floats: passed by position, a swap would go unnoticed and delete what the grace keeps."""
    prefix = tmp_path / "p"
    _status(prefix, "a/old-1", State.SUCCESS)
    report = collect(open_prefix(str(prefix)), {})
    with pytest.raises(TypeError):
        sweep(report, open_prefix(str(prefix)), 24, 10 * HOUR)  # type: ignore[misc]
    assert (prefix / status_key("a/old-1")).exists()
