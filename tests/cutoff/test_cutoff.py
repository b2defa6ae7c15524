"""Early cutoff (issue 44.3, executor/engine/run/cutoff.py), in real runs of a three-step chain: a step
under a new id whose dependencies' outputs are byte-identical (by manifest digest) to what an earlier
output of it consumed is not run; its new id points at that output, and the cascade stops there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from executor.__main__ import main as tools_main
from executor.cli import run
from tests.cutoff.chain_experiment import chain

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = Path(__file__).with_name("chain_experiment.py")


@pytest.fixture
def sidefx(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "sidefx"
    path.mkdir()
    monkeypatch.setenv("CUT_SIDEFX", str(path))
    return path


def ran(sidefx: Path) -> dict[str, int]:
    """How many times each step's function really ran (evidence files), then forget them."""
    counts: dict[str, int] = {}
    for path in sidefx.glob("ran-*"):
        counts[path.name.split("-")[1]] = counts.get(path.name.split("-")[1], 0) + 1
        path.unlink()
    return counts


def go(prefix: Path, capsys, *args: str, **chain_args) -> tuple[int, str]:
    code = run(chain(**chain_args), "cut", argv=["--prefix", str(prefix), "--runner", "inline", *args], environ={})
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def statuses(prefix: Path, name: str) -> list[dict]:
    """Every status of step `name` under the prefix, oldest first."""
    found = [json.loads(p.read_text()) for p in prefix.glob(f"cut/{name}-*/.executor/status.json")]
    return sorted(found, key=lambda s: s["written_at"])


def text_of(prefix: Path, status: dict) -> str:
    rel = (status.get("alias_of") or {}).get("output_rel") or status["step_id"]
    return (prefix / rel / "text.txt").read_text()


def test_a_code_version_bump_with_an_identical_output_stops_the_cascade_there(tmp_path, sidefx, capsys):
    assert go(tmp_path, capsys)[0] == 0
    assert ran(sidefx) == {"write": 1, "upper": 1, "frame": 1}
    (old_upper,), (old_frame,) = statuses(tmp_path, "upper"), statuses(tmp_path, "frame")

    code, dry = go(tmp_path, capsys, "--dry-run", write_version="2")
    assert code == 0
    assert "cut/upper: runs unless cut/write's output is unchanged" in dry, dry
    assert "cut/frame: runs unless cut/upper's output is unchanged" in dry, dry

    code, explained = go(tmp_path, capsys, "--explain", "cut/upper", write_version="2")
    assert "cut/upper: runs unless cut/write's output is unchanged (then cut off)" in explained, explained

    code, out = go(tmp_path, capsys, write_version="2")
    assert code == 0, out
    assert ran(sidefx) == {"write": 1}  # the cascade stopped at write's identical output
    new_upper, new_frame = statuses(tmp_path, "upper")[1], statuses(tmp_path, "frame")[1]
    write_content = statuses(tmp_path, "write")[1]["content_sha256"]
    assert statuses(tmp_path, "write")[0]["content_sha256"] == write_content  # byte-identical output
    assert new_upper["state"] == "SUCCESS" and new_upper["step_id"] != old_upper["step_id"]
    assert new_upper["alias_of"]["step_id"] == old_upper["step_id"]
    assert new_upper["alias_of"]["cut_off"] == (f"cut off: cut/write's output unchanged "
                                                f"(manifest sha256 {write_content[:12]}…)")
    assert new_upper["content_sha256"] == old_upper["content_sha256"]
    assert new_frame["alias_of"]["step_id"] == old_frame["step_id"]  # cut off in turn, through upper's alias
    assert new_frame["alias_of"]["cut_off"].startswith("cut off: cut/upper's output unchanged")
    assert text_of(tmp_path, new_frame) == "[HELLO WORLD]"
    record = json.loads(next(tmp_path.glob(f"{new_upper['step_id']}/.executor/record.json")).read_text())
    assert record["extra"]["cut_off"] == [{"name": "cut/write", "old_digest": statuses(tmp_path, "write")[0]["digest"],
                                           "new_digest": statuses(tmp_path, "write")[1]["digest"],
                                           "content_sha256": write_content}]
    assert "✂ cut/upper not run: cut off: cut/write's output unchanged" in out, out
    assert "✂ cut/frame not run: cut off: cut/upper's output unchanged" in out, out
    # the live view's progress line counts both as done
    assert re.search(r"✂ cut/frame not run: [^\n]*\n\s*progress: 3/3 done, 0 running, 0 waiting", out), out
    assert re.search(r"cut/frame\s*│\s*cut off\s*│\s*-\s*│\s*cut off: cut/upper's output unchanged", out), out

    run_file = json.loads(Path(re.search(r"run record: (\S+\.json)", out).group(1)).read_text())
    entry = next(e for e in run_file["steps"] if e["name"] == "cut/upper")
    assert entry["cut_off"] == new_upper["alias_of"]["cut_off"] and entry["status"] == "succeeded"
    assert "cut_off" not in next(e for e in run_file["steps"] if e["name"] == "cut/write")
    report = Path(re.search(r"report: (\S+\.html)", out).group(1)).read_text()
    assert "cut off: cut/write&#x27;s output unchanged (manifest sha256" in report, report[:2000]
    assert tools_main(["status", "--prefix", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert re.search(rf"{new_frame['step_id']}\s+SUCCESS.*\n\s+cut off: cut/upper's output unchanged \(manifest "
                     rf"sha256 \w+…\)\n\s+alias of: {old_frame['step_id']}\n", table), table
    assert tools_main(["status", "--prefix", str(tmp_path), new_upper["step_id"]]) == 0
    one = capsys.readouterr().out
    assert f"alias of    {old_upper['step_id']}" in one and "declared by early cutoff (run " in one, one
    code, explained = go(tmp_path, capsys, "--explain", "cut/frame", write_version="2")
    assert f"cut/frame: not run: {new_frame['alias_of']['cut_off']}; its output is an earlier one's" in explained

    code, out = go(tmp_path, capsys, write_version="2")  # a later run: nothing to do
    assert code == 0 and "all 3 step(s) already succeeded; nothing to do" in out, out
    assert ran(sidefx) == {}
    code, dry = go(tmp_path, capsys, "--dry-run", write_version="2")
    assert "succeeded (cut off: cut/upper's output unchanged" in dry, dry


def test_a_config_change_whose_effect_vanishes_downstream_is_cut_off_where_the_bytes_stop_changing(
        tmp_path, sidefx, capsys):
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    code, out = go(tmp_path, capsys, text="HELLO world")
    assert code == 0, out
    assert ran(sidefx) == {"write": 1, "upper": 1}  # upper's new output is byte-identical: frame is cut off
    old_frame, new_frame = statuses(tmp_path, "frame")
    assert new_frame["alias_of"]["step_id"] == old_frame["step_id"]
    assert new_frame["alias_of"]["cut_off"].startswith("cut off: cut/upper's output unchanged")
    assert text_of(tmp_path, new_frame) == "[HELLO WORLD]"
    assert "✂ cut/frame not run" in out and "✂ cut/upper" not in out, out


def test_a_changed_output_reruns_its_dependents(tmp_path, sidefx, capsys):
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    code, out = go(tmp_path, capsys, text="goodbye world")
    assert code == 0, out
    assert ran(sidefx) == {"write": 1, "upper": 1, "frame": 1}
    assert not any(s.get("alias_of") for s in statuses(tmp_path, "frame") + statuses(tmp_path, "upper"))
    assert text_of(tmp_path, statuses(tmp_path, "frame")[1]) == "[GOODBYE WORLD]"
    assert "not run" not in out


def test_a_run_interrupted_before_the_dependent_cuts_it_off_in_a_later_run(tmp_path, sidefx, capsys):
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    assert go(tmp_path, capsys, "--only", "cut/write", write_version="2")[0] == 0  # write alone, as if stopped
    assert ran(sidefx) == {"write": 1}
    code, out = go(tmp_path, capsys, write_version="2")
    assert code == 0 and ran(sidefx) == {}, out
    assert "✂ cut/upper not run" in out and "✂ cut/frame not run" in out, out


def test_force_run_runs_the_step_itself_and_cutoff_then_applies_below(tmp_path, sidefx, capsys):
    """--force-run re-runs a step under its own id (no cutoff for it); a new id below stays cut off."""
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    assert go(tmp_path, capsys, write_version="2")[0] == 0
    ran(sidefx)
    code, out = go(tmp_path, capsys, "--force-run", "cut/upper", write_version="2")
    assert code == 0, out
    assert ran(sidefx) == {"upper": 1}


def subprocess_run(prefix: str, sidefx: Path, *args: str, env: dict | None = None,
                   **extra: str) -> subprocess.Popen:
    environ = {**(env or os.environ), "CUT_SIDEFX": str(sidefx), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **extra}
    return subprocess.Popen([sys.executable, str(EXPERIMENT), "--prefix", prefix, *args], cwd=REPO, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_runners_racing_through_a_cutoff_make_one_decision(tmp_path, sidefx, capsys):
    prefix = str(tmp_path / "prefix")
    assert go(Path(prefix), capsys)[0] == 0  # the first outputs, made in this process: one interpreter fewer
    ran(sidefx)
    # write ends once both racers have planned (one runs it, one waits on its lease): their run files and
    # the first run's, 3 in runs/, are written after each plan; so both are in the race before the decision
    racers = [subprocess_run(prefix, sidefx, "--runner", "inline", CUT_WRITE_VERSION="2", CUT_WRITE_AWAIT_RUNS="3")
              for _ in range(2)]
    outs = [r.communicate(timeout=180)[0] for r in racers]
    assert [r.returncode for r in racers] == [0, 0], outs
    assert ran(sidefx) == {"write": 1}, outs  # write ran once (its lease), upper and frame not at all
    for name in ("upper", "frame"):
        decided = [o for o in outs if f"✂ cut/{name} not run" in o]
        assert len(decided) == 1, outs  # one runner decided it; the other saw its commit
        other = outs[1 - outs.index(decided[0])]
        assert f"cut/{name} (completed by another runner)" in other, other  # it was in the race, and lost
        new = sorted((json.loads(p.read_text()) for p in Path(prefix).glob(f"cut/{name}-*/.executor/status.json")),
                     key=lambda s: s["written_at"])[1]
        assert new["seq"] == 1 and new["attempt"] == 1  # one lease, one fenced commit: nobody wrote over it
        assert new["owner"]["pid"] == racers[outs.index(decided[0])].pid
        record = json.loads(Path(prefix, new["step_id"], ".executor", "record.json").read_text())
        assert record["run_id"] == new["owner"]["run_id"]  # the record is the decider's, not overwritten


def test_the_live_panel_counts_a_cut_off_step_as_done_and_says_why():
    import io

    from rich.console import Console

    from executor.tools.console_live import LiveReporter

    buffer = io.StringIO()
    reporter = LiveReporter(console=Console(file=buffer, force_terminal=True, width=200), still_running_every_s=60)

    class Node:
        digest, name, step_id = "d" * 64, "acc/frame", "acc/frame-dddddddddddd"

    reporter.step_cut_off(Node, "cut off: acc/upper's output unchanged (manifest sha256 3f2a9c0d1e2b…)")
    assert reporter.counts()["done"] == 1 and reporter.tally().startswith("1/1 done")
    reporter.close()
    assert "acc/frame not run: cut off: acc/upper's output unchanged" in buffer.getvalue()


def test_a_step_whose_own_identity_changed_runs_and_only_its_dependents_may_be_cut_off(tmp_path, sidefx, capsys):
    """upper's own code_version bump is a change of upper itself: it runs (its dependencies' outputs are
    unchanged, but that is no evidence about its own code); frame, below it, is cut off."""
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    code, out = go(tmp_path, capsys, upper_version="2")
    assert code == 0, out
    assert ran(sidefx) == {"upper": 1}
    assert "✂ cut/frame not run" in out and "✂ cut/upper" not in out, out


def test_a_step_changed_itself_runs_even_when_its_dependency_is_byte_identical(tmp_path, sidefx, capsys):
    """write and upper both bumped: write's output is identical, but upper's own code_version changed, so
    the earlier upper output is no evidence for the new one: upper runs; frame is cut off."""
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    code, out = go(tmp_path, capsys, write_version="2", upper_version="2")
    assert code == 0, out
    assert ran(sidefx) == {"write": 1, "upper": 1}
    assert "✂ cut/frame not run" in out and "✂ cut/upper" not in out, out


def test_no_cutoff_without_the_consumed_digest_on_record(tmp_path, sidefx, capsys):
    """An earlier output whose record does not say what it consumed (made before content tracking) is no
    evidence: never a guess, the step runs."""
    assert go(tmp_path, capsys)[0] == 0
    ran(sidefx)
    path = next(tmp_path.glob("cut/upper-*/.executor/record.json"))
    record = json.loads(path.read_text())
    for dep in record["dependencies"]:
        dep["content_sha256"] = None
    path.write_text(json.dumps(record))
    code, out = go(tmp_path, capsys, write_version="2")
    assert code == 0, out
    assert ran(sidefx) == {"write": 1, "upper": 1}  # upper runs; its output is identical, so frame is cut off
    assert "✂ cut/frame not run" in out and "✂ cut/upper" not in out, out


def test_a_rechecked_step_taken_over_from_a_silent_runner_is_still_cut_off(tmp_path, sidefx, capsys, monkeypatch):
    """cut/upper, planned "still current unless cut/write's output changed" (write forced to re-run), is
    found held by another runner that fell silent: taken over, it is not forced to run (only --force-run
    forces that), so early cutoff decides it: an earlier output of it (before write's version bump)
    consumed exactly write's bytes; its function does not run (step_job's force_run: RUN over a SUCCESS)."""
    import functools

    import executor
    from executor.core.record import Owner, State, Status, parse_status
    from executor.engine.events import StepFinished, StepStarted
    from executor.engine.run import lease as lease_module
    from executor.engine.store.local import LocalStore

    assert go(tmp_path, capsys)[0] == 0
    assert go(tmp_path, capsys, write_version="2")[0] == 0  # upper's new id: cut off, an alias of the first
    assert ran(sidefx) == {"write": 2, "upper": 1, "frame": 1}
    [upper_key] = [str(p.relative_to(tmp_path)) for p in tmp_path.glob("cut/upper-*/.executor/status.json")
                   if json.loads(p.read_text()).get("alias_of")]
    store = LocalStore(str(tmp_path))

    def hold_upper_elsewhere(event) -> None:  # once write committed again: another runner holds upper, silent
        if isinstance(event, StepFinished) and event.node.name == "cut/write":
            current = store.read(upper_key)
            mine = parse_status(current.data, upper_key)
            theirs = Status(State.RUNNING, mine.digest, mine.step_id, mine.seq + 1, mine.attempt + 1,
                            Owner("someone-elses-run", "elsewhere", 4242, "someone"), time.time(),
                            started_at=time.time())
            assert store.replace_if_generation(upper_key, theirs.to_bytes(), current.generation) is not None

    readings = iter([0.0, 2.0])  # the watch sees the holder once, then silent for the whole TTL: no real wait
    monkeypatch.setattr(lease_module, "StalenessWatch", functools.partial(
        lease_module.StalenessWatch, clock=lambda: next(readings, 100.0)))
    started: list = []
    result = executor.run(chain(write_version="2"), prefix=str(tmp_path), runner="inline", force_run="cut/write",
                          lease_ttl=2, heartbeat_interval=0.5, subscribers=[
                              hold_upper_elsewhere, lambda e: started.append(e) if isinstance(e, StepStarted) else None])
    assert result.ok
    assert [(e.node.name, e.takeover) for e in started] == [("cut/write", False)]  # upper taken over, not started
    assert ran(sidefx) == {"write": 1}
    assert result.step("cut/upper").cut_off.startswith("cut off: cut/write's output unchanged")
    now = parse_status((tmp_path / upper_key).read_bytes(), upper_key)
    assert now.state == State.SUCCESS and now.owner.run_id != "someone-elses-run" and now.alias_of["cut_off"]
