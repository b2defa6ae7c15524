"""gc: exactly the unreachable outputs are listed; deletion needs the flag, a grace period, no live lease."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from executor.tools.loading import load_experiment
from executor.core.record import Owner, State, Status
from executor.engine.prefix.prefixes import open_prefix

from .toy import run_main


def _ids(toy) -> dict[str, str]:
    return {n.name: n.step_id for n in load_experiment(toy.path).graph.nodes.values()}


def _listed(out: str) -> set[str]:
    return {line.split()[-1] for line in out.splitlines() if line.startswith("    ") and "written by:" not in line}


def _fixture_prefix(toy):
    """v1 run, then v2 (vocab changed) run: v1's tokenize/train/report are unreachable from v2."""
    v1 = _ids(toy)
    assert toy.run("--runner", "inline")[0] == 0
    toy.write(VOCAB="8192")
    v2 = _ids(toy)
    assert toy.run("--runner", "inline")[0] == 0
    running = Path(toy.prefix, "toy", "abandoned-000000000000", ".executor")
    running.mkdir(parents=True)
    status = Status(State.RUNNING, "e" * 64, "toy/abandoned-000000000000", seq=3, attempt=1,
                    owner=Owner("run-x", "elsewhere", 42, "u"), written_at=time.time() - 7200)
    (running / "status.json").write_bytes(status.to_bytes())
    return v1, v2


def test_gc_lists_exactly_the_unreachable_outputs_and_deletes_nothing_without_the_flag(toy):
    v1, v2 = _fixture_prefix(toy)
    before = sorted(p for p in Path(toy.prefix).rglob("*"))
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path))
    assert code == 0, out
    unreachable = {v1["toy/tokenize"], v1["toy/train"], v1["toy/report"], "toy/abandoned-000000000000"}
    assert _listed(out) == unreachable
    assert "RUNNING" in out and "nothing deleted" in out
    assert f"gc: listing every object under {toy.prefix}" in out  # said before the one long call
    assert sorted(p for p in Path(toy.prefix).rglob("*")) == before

    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path), "--pin", v1["toy/train"])
    assert _listed(out) == unreachable - {v1["toy/train"]}


def test_gc_delete_respects_grace_running_leases_pins_and_runs(toy):
    v1, v2 = _fixture_prefix(toy)
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path), "--delete")  # default grace: 24 h
    assert code == 0 and "deleted 0 output(s)" in out, out

    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path), "--delete", "--grace-hours", "0",
                         "--pin", v1["toy/report"])
    assert code == 0, out
    prefix = Path(toy.prefix)
    assert not (prefix / v1["toy/tokenize"]).exists() and not (prefix / v1["toy/train"]).exists()
    assert (prefix / v1["toy/report"] / "report.txt").exists()  # pinned
    assert (prefix / "toy/abandoned-000000000000/.executor/status.json").exists()  # RUNNING: never
    assert "RUNNING: a live lease" in out
    for step_id in v2.values():
        assert (prefix / step_id / ".executor" / "status.json").exists()
    assert len(list((prefix / "runs").glob("*.json"))) == 2  # runs/ is never touched


def test_gc_keeps_what_a_reachable_step_was_adopted_from(toy):
    v1, _ = _fixture_prefix(toy)
    toy.write(TEXT=repr("to  be or not to be"))
    code, out = run_main("adopt", "--prefix", toy.prefix, str(toy.path), "toy/raw", "--from", v1["toy/raw"],
                         "--reason", "whitespace only")
    assert code == 0, out
    # toy/raw's old output is reachable only through the alias now: toy's current graph has the new id
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path))
    assert v1["toy/raw"] not in _listed(out)
    alias = json.loads((Path(toy.prefix) / _ids(toy)["toy/raw"] / ".executor/status.json").read_text())
    assert alias["alias_of"]["step_id"] == v1["toy/raw"]


def test_gc_keeps_what_the_committed_plan_file_lists(toy):
    assert toy.run("--update-plan", prefix=False)[0] == 0  # the ids file names v1's ids
    v1, _ = _fixture_prefix(toy)
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path))
    assert _listed(out) == {"toy/abandoned-000000000000"}, out
    assert toy.run("--update-plan", prefix=False)[0] == 0  # now v2's
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path))
    assert _listed(out) == {v1["toy/tokenize"], v1["toy/train"], v1["toy/report"], "toy/abandoned-000000000000"}


def test_gc_on_an_s3_prefix(s3_emulator):
    from executor.engine.prefix import outputs
    from executor.tools.gc import collect, sweep
    from executor.core.record import status_key

    from .test_verify import _completed_step

    prefix, options = s3_emulator.fresh_prefix("gc"), dict(s3_emulator.storage_options)
    for step_id in ("a/old-0123456789ab", "a/pinned-0123456789ab"):
        _completed_step(prefix, options, step_id, {"f": b"x" * 10})
    fs = outputs.filesystem(prefix, options)
    busy = Status(State.RUNNING, "e" * 64, "a/busy-0123456789ab", seq=1, attempt=1, owner=Owner("r", "h", 1, "u"),
                  written_at=time.time())
    fs.pipe_file(outputs.join(prefix, status_key("a/busy-0123456789ab")), busy.to_bytes())
    fs.pipe_file(outputs.join(prefix, "runs/x.json"), b"{}")
    report = collect(open_prefix(prefix, options), {}, ["a/pinned-0123456789ab"])
    assert sorted(o.rel for o in report.garbage) == ["a/busy-0123456789ab", "a/old-0123456789ab"]
    sweep(report, open_prefix(prefix, options), grace_hours=0, now=time.time() + 1)
    assert report.deleted == ["a/old-0123456789ab"] and "a/busy-0123456789ab" in report.spared
    left = {p.split("/", 2)[2] for p in fs.find(prefix)}
    assert "runs/x.json" in left and "a/busy-0123456789ab/.executor/status.json" in left
    assert not any(p.startswith("a/old-") for p in left)


def test_gc_delete_leaves_alone_what_it_cannot_understand(toy):
    """A truncated status, and a RUNNING lease written by a newer stepgraph, are not garbage to us."""
    v1, _ = _fixture_prefix(toy)
    prefix = Path(toy.prefix)
    truncated = prefix / v1["toy/train"] / ".executor" / "status.json"
    truncated.write_bytes(truncated.read_bytes()[:20])
    newer = prefix / "toy" / "future-000000000000" / ".executor"
    newer.mkdir(parents=True)
    (newer / "status.json").write_text(json.dumps({"schema": 99, "state": "RUNNING", "lease": {"x": 1}}))
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path), "--delete", "--grace-hours", "0")
    assert code == 0, out
    assert (prefix / v1["toy/train"]).exists() and truncated.exists()
    assert (newer / "status.json").exists()
    assert "status not understood, left alone" in out
    assert not (prefix / v1["toy/tokenize"]).exists()  # understood garbage still goes


def test_gc_delete_reports_what_the_storage_refused_and_fails(toy, monkeypatch):
    """A deletion the storage refuses (here: train's output) is printed with the storage's error and
    the exit code is 1; the other garbage is deleted all the same."""
    import fsspec.implementations.local as local_fs

    v1, _ = _fixture_prefix(toy)
    prefix = Path(toy.prefix)
    rm = local_fs.LocalFileSystem.rm

    def refuse_train(self, path, recursive=False, maxdepth=None):
        if path.rstrip("/").endswith(v1["toy/train"]):
            raise PermissionError("retention policy: object is locked")
        return rm(self, path, recursive=recursive, maxdepth=maxdepth)

    monkeypatch.setattr(local_fs.LocalFileSystem, "rm", refuse_train)
    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path), "--delete", "--grace-hours", "0")
    assert code == 1, out
    assert f"could not delete {v1['toy/train']}: PermissionError: retention policy: object is locked" in out
    assert "deleted 2 output(s); kept 1 unreachable one(s); could not delete 1 (the storage refused" in out
    assert not (prefix / v1["toy/tokenize"]).exists() and not (prefix / v1["toy/report"]).exists()
    assert (prefix / v1["toy/train"]).exists()


@pytest.mark.parametrize("backend", ["s3", "gcs"])
def test_gc_on_an_object_store_lists_the_bytes_a_deletion_frees(backend, request):
    """An object at an output's own key (a folder marker `a/x/`, or an object named like the folder) goes
    when the folder is deleted, so the listing counts it: what gc lists as garbage is what --delete frees."""
    from executor.engine.prefix import outputs
    from executor.tools.gc import collect, sweep

    from .test_verify import _completed_step

    emulator = request.getfixturevalue(f"{backend}_emulator")
    prefix, options = emulator.fresh_prefix("gc-own-key"), dict(emulator.storage_options)
    for step_id in ("a/named-0123456789ab", "a/marked-0123456789ab", "a/kept-0123456789ab"):
        _completed_step(prefix, options, step_id, {"f": b"x" * 10})
    fs = outputs.filesystem(prefix, options)
    fs.pipe_file(outputs.join(prefix, "a/named-0123456789ab"), b"y" * 7)  # an object named like the folder
    fs.pipe_file(outputs.join(prefix, "a/marked-0123456789ab/"), b"")  # a folder marker, as consoles make

    def stored() -> dict[str, int]:
        fs.invalidate_cache()
        return {path: info["size"] for path, info in fs.find(prefix, detail=True).items()}

    before = stored()
    report = collect(open_prefix(prefix, options), {"a/kept-0123456789ab": "root"}, [])
    sweep(report, open_prefix(prefix, options), grace_hours=0, now=time.time() + 1)
    freed = {path: size for path, size in before.items() if path not in stored()}
    assert report.deleted == ["a/marked-0123456789ab", "a/named-0123456789ab"]
    assert report.garbage_bytes == sum(freed.values())
    assert sum(o.files for o in report.garbage) == len(freed)
