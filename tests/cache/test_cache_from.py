"""--cache-from (issue 30): another prefix's outputs of the same steps are copied, checked file by
file against their manifests, instead of run; on the in-process runner, between local prefixes."""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import executor
from executor import ExecutorStep, open_file, output_path_of, this_output_path
from executor.core.plan import Action
from executor.engine.events import StepStarted
from executor.tools.plan_json import write_plan_json
from executor.tools.verify import verify_path
from executor.engine.prefix.prefixes import open_prefix
from tests.cache.at_once import run_at_once
from tests.cache.graph import MIB, build


def run(prefix: Path, **options):
    return executor.run(build(), prefix=str(prefix), runner="inline", environ={}, **options)


def record(prefix: Path, name: str) -> dict:
    [path] = prefix.glob(f"{name}-*/.executor/record.json")
    return json.loads(path.read_text())


def output_dir(prefix: Path, name: str) -> Path:
    [path] = prefix.glob(f"{name}-*")
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, str]:
    """Prefix A, with every step run once (and the run's id)."""
    prefix = tmp_path_factory.mktemp("a")
    result = run(prefix)
    assert result.ok and all(s.ran_here for s in result.steps)
    return prefix, result.run_id


def damaged_copy_of(source: Path, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "a-damaged"
    shutil.copytree(source, copy)
    return copy


def test_targets_are_copied_checked_and_verified_and_upstream_is_left(source, tmp_path):
    a, a_run = source
    b = tmp_path / "b"
    result = run(b, cache_from=(str(a),))
    assert result.ok
    assert {s.name: s.decision for s in result.steps} == {"cache/report": "copy", "cache/notes": "copy"}
    assert not any(s.ran_here for s in result.steps)  # no step function ran
    for name in ("cache/report", "cache/notes"):
        copied = record(b, name)["extra"]["copied_from"]
        assert (copied["prefix"], copied["run_id"]) == (str(a), a_run)
        assert record(b, name)["run_id"] == result.run_id
    assert (output_dir(b, "cache/report") / "report.txt").read_bytes() == \
        (output_dir(a, "cache/report") / "report.txt").read_bytes()
    assert (output_dir(b, "cache/notes") / "sub" / "b.txt").read_text() == "sub/b.txt: abc\n"
    notes = record(b, "cache/notes")  # paths into A's output name the copy here, in its result and config
    assert notes["result"]["first"] == f"{output_dir(b, 'cache/notes')}/a.txt"
    assert notes["config"]["output_path"] == str(output_dir(b, "cache/notes"))
    assert not list((b / "cache").glob("raw-*")) and not list((b / "cache").glob("upper-*"))  # not needed
    checked = verify_path(open_prefix(str(b)))
    assert len(checked) == 2 and all(v.ok for v in checked)
    again = run(b, cache_from=(str(a),))  # now complete here: skipped, nothing read from A
    assert {s.decision for s in again.steps} == {"skip"}


def test_a_changed_byte_makes_that_step_run_and_the_rest_copy(source, tmp_path):
    a = damaged_copy_of(source[0], tmp_path)
    report = output_dir(a, "cache/report") / "report.txt"
    data = bytearray(report.read_bytes())
    data[MIB // 2] ^= 0x01  # one byte changed, size unchanged
    report.write_bytes(bytes(data))
    b = tmp_path / "b"
    events: list = []
    result = run(b, cache_from=(str(a),), subscribers=[events.append])
    assert result.ok
    assert {s.name: s.ran_here for s in result.steps} == {"cache/report": True, "cache/notes": False,
                                                          "cache/upper": False}
    assert "copied_from" not in record(b, "cache/report").get("extra", {})  # it ran here
    assert (output_dir(b, "cache/report") / "report.txt").read_bytes() != bytes(data)
    # report ran, so what it reads was needed: upper copied (checked), raw still not needed; the
    # result (and the run's end table) include it
    assert record(b, "cache/upper")["extra"]["copied_from"]["prefix"] == str(a)
    upper = result.step("cache/upper")
    assert (upper.decision, upper.status, upper.ran_here) == ("copy", "succeeded", False)
    assert not list((b / "cache").glob("raw-*"))
    assert all(v.ok for v in verify_path(open_prefix(str(b))))


def test_a_missing_file_makes_that_step_run(source, tmp_path):
    a = damaged_copy_of(source[0], tmp_path)
    (output_dir(a, "cache/notes") / "sub" / "b.txt").unlink()
    b = tmp_path / "b"
    result = run(b, cache_from=(str(a),))
    assert result.ok
    assert {s.name: s.ran_here for s in result.steps} == {"cache/report": False, "cache/notes": True}
    assert (output_dir(b, "cache/notes") / "sub" / "b.txt").read_text() == "sub/b.txt: abc\n"
    assert all(v.ok for v in verify_path(open_prefix(str(b))))


def test_the_next_source_is_tried_when_the_first_is_damaged(source, tmp_path):
    bad = damaged_copy_of(source[0], tmp_path)
    (output_dir(bad, "cache/notes") / "a.txt").write_text("changed\n")
    b = tmp_path / "b"
    result = run(b, cache_from=(str(bad), str(source[0])))
    assert result.ok and not any(s.ran_here for s in result.steps)
    assert record(b, "cache/notes")["extra"]["copied_from"]["prefix"] == str(source[0])
    assert record(b, "cache/report")["extra"]["copied_from"]["prefix"] == str(bad)


def test_dry_run_shows_copy_with_source_and_size_and_writes_nothing(source, tmp_path):
    b = tmp_path / "b"
    planned = executor.plan(build(), prefix=str(b), cache_from=(str(source[0]),), environ={})
    assert {s.name: s.decision for s in planned.steps} == {"cache/report": "copy", "cache/notes": "copy"}
    out = io.StringIO()
    write_plan_json(planned.plan, planned.prefix, out)
    rows = {row["name"]: row for row in json.loads(out.getvalue())["steps"]}
    assert rows["cache/report"]["copy_from"] == [{"prefix": str(source[0]), "run_id": source[1], "bytes": MIB}]
    assert "copy from" in rows["cache/report"]["reason"] and "1.0 MiB" in rows["cache/report"]["reason"]
    assert not b.exists()


def test_cache_from_comes_from_the_environment_too(source, tmp_path):
    planned = executor.plan(build(), prefix=str(tmp_path / "b"), environ={"EXECUTOR_CACHE_FROM": f"{source[0]},"})
    assert {s.decision for s in planned.steps} == {"copy"}


def test_force_run_steps_run_not_copied(source, tmp_path):
    planned = executor.plan(build(), prefix=str(tmp_path / "b"), cache_from=(str(source[0]),),
                            force_run="cache/notes", environ={})
    assert {s.name: s.decision for s in planned.steps}["cache/notes"] == "run"


def test_a_copy_over_the_transfer_budget_is_not_made_and_the_plan_says_so(source, tmp_path):
    b = tmp_path / "b"
    result = run(b, cache_from=(str(source[0]),), transfer_budget_gb=0.0001)  # 0.1 MB vs a 1 MiB report
    decisions = {s.name: s for s in result.steps}
    assert decisions["cache/report"].decision == "run" and decisions["cache/report"].ran_here
    assert "transfer budget" in decisions["cache/report"].reason and "1.0 MiB" in decisions["cache/report"].reason
    assert decisions["cache/notes"].decision == "copy"  # small: within the budget
    assert record(b, "cache/upper")["extra"]["copied_from"]  # what report reads is copied (1 KB)
    assert result.ok


def test_the_own_prefix_is_refused_as_a_source(source):
    with pytest.raises(executor.ExecutorError, match="own prefix"):
        executor.plan(build(), prefix=str(source[0]), cache_from=(str(source[0]),), environ={})


def test_two_runners_racing_for_the_same_copies_make_one_copy_each_and_both_succeed(source, tmp_path):
    b = tmp_path / "b"
    started: list = []
    results = run_at_once(2, lambda: run(b, cache_from=(str(source[0]),), subscribers=[started.append],
                                         lease_ttl=20, heartbeat_interval=2))
    assert len(results) == 2 and all(r.ok for r in results), [r.steps for r in results]
    copies = [e.name for e in started if isinstance(e, StepStarted)]
    assert sorted(copies) == ["cache/notes", "cache/report"]  # each output copied once, by one runner
    assert all(v.ok for v in verify_path(open_prefix(str(b))))


def test_a_rejected_copy_leaves_nothing_behind(source, tmp_path):
    """The copy itself (as the worker runs it): a source with one changed file is refused with the
    file named, and the files it had already written are removed."""
    from executor.engine.transfers.copy_output import CopyConfig, SourceRejected, copy_output

    a = damaged_copy_of(source[0], tmp_path)
    notes = output_dir(a, "cache/notes")
    files = tuple(record(a, "cache/notes")["manifest"])
    (notes / "sub" / "b.txt").write_text("sub/b.txt: abd\n")  # same size, one byte changed
    destination = tmp_path / "dest"
    with pytest.raises(SourceRejected, match="sub/b.txt: sha256 differs from the manifest"):
        copy_output(CopyConfig(str(notes), str(destination), files, parallel=1))
    assert not [p for p in destination.rglob("*") if p.is_file()]  # a.txt was copied first, then removed
    copied = copy_output(CopyConfig(str(output_dir(source[0], "cache/notes")), str(destination), files))
    assert copied["files"] == 2 and (destination / "sub" / "b.txt").read_text() == "sub/b.txt: abc\n"


def test_without_cache_from_planning_reads_nothing_more(source, tmp_path):
    """No --cache-from, no EXECUTOR_CACHE_FROM: the plan never loads the cache-from code, so it
    reads no other prefix (a no-op re-run costs what it did)."""
    import subprocess
    import sys

    script = ("import sys, executor; from tests.cache.graph import build; "
              f"r = executor.plan(build(), prefix={str(source[0])!r}, environ={{}}); "
              "print(sorted({str(s.decision) for s in r.steps}), 'executor.engine.transfers.cache_from' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["['skip']", "False"], done.stdout + done.stderr


def test_a_source_deleted_after_planning_is_not_used(source, tmp_path):
    """The source's notes output disappears between the plan (which found it) and the copy: that
    step runs here, the other still copies."""
    import shutil

    from executor.engine.events import PlanMade

    a = damaged_copy_of(source[0], tmp_path)

    def delete_after_planning(event) -> None:
        if isinstance(event, PlanMade):
            assert {d.action for d in event.plan.decisions.values()} == {Action.COPY}
            shutil.rmtree(output_dir(a, "cache/notes"))

    b = tmp_path / "b"
    result = run(b, cache_from=(str(a),), subscribers=[delete_after_planning])
    assert result.ok
    assert {s.name: s.ran_here for s in result.steps} == {"cache/report": False, "cache/notes": True}
    assert all(v.ok for v in verify_path(open_prefix(str(b))))


def test_a_copy_forced_to_run_again_gets_the_inputs_it_reads(source, tmp_path):
    """report and notes were copied here; report forced to run again reads upper, which was never
    made here: upper (and raw) must come too — a forced copy is no copy that stays complete."""
    a = source[0]
    b = tmp_path / "b"
    assert run(b, cache_from=(str(a),)).ok
    planned = executor.plan(build(), prefix=str(b), cache_from=(str(a),), force_run="cache/report", environ={})
    decisions = {s.name: s.decision for s in planned.steps}
    assert decisions["cache/report"] == "run" and decisions["cache/upper"] in ("copy", "run"), decisions
    result = run(b, cache_from=(str(a),), force_run="cache/report")
    assert result.ok and result.step("cache/report").ran_here
    assert (output_dir(b, "cache/upper") / "upper.txt").exists()


@pytest.mark.parametrize("failed_step, blocked", [("cache/upper", None), ("cache/raw", "cache/upper")])
@pytest.mark.parametrize("force_failed", [False, True])
def test_a_failure_upstream_of_a_copy_is_reported_until_failures_are_retried(source, tmp_path, force_failed,
                                                                             failed_step, blocked):
    """A step upstream of report failed here once; report, reading it (through upper when raw
    failed), is a complete copy. A plain run still stops at the failure and blocks what reads it
    (exit 1: a failure is never hidden); with --force-failed the failed step would run again, and it
    is set aside instead, with what reads it, since nothing here needs them."""
    import time

    from executor.core.record import State, Status

    a, b = source[0], tmp_path / "b"
    assert run(b, cache_from=(str(a),)).ok
    everything = executor.plan(build(), prefix=str(tmp_path / "empty"), environ={}).steps
    [step] = [s for s in everything if s.name == failed_step]  # b's plan lists only what it needs
    failed = Status(State.FAILED, step.digest, step.step_id, seq=0, attempt=1, owner=None,
                    written_at=time.time(), error="ValueError: once")
    (b / step.step_id / ".executor").mkdir(parents=True)
    (b / step.step_id / ".executor" / "status.json").write_bytes(failed.to_bytes())
    result = run(b, cache_from=(str(a),), force_failed=force_failed)
    assert result.ok is force_failed
    decisions = {s.name: s.decision for s in result.steps}
    assert decisions.get(failed_step) == (None if force_failed else "stop"), decisions
    assert decisions.get(blocked) == (None if force_failed or blocked is None else "blocked"), decisions
    assert not result.step("cache/report").ran_here


def test_a_stale_step_upstream_of_a_copy_runs_again(source, tmp_path):
    """Only a step with no output here (new, or failed) is set aside as not needed: raw and upper
    were made here, report copied; once raw's output is no longer what upper consumed, upper is
    stale and runs again, as ever, though only the copy reads it."""
    import dataclasses

    from executor.core.record import parse_status

    a, b = source[0], tmp_path / "b"
    assert run(b, only="cache/upper").ok  # raw and upper made here
    assert run(b, cache_from=(str(a),)).ok  # report and notes copied
    [raw_status] = b.glob("cache/raw-*/.executor/status.json")
    status = parse_status(raw_status.read_bytes(), str(raw_status))
    raw_status.write_bytes(dataclasses.replace(status, seq=status.seq + 1, content_sha256="0" * 64).to_bytes())
    result = run(b, cache_from=(str(a),))
    assert result.ok
    upper = result.step("cache/upper")
    assert (upper.decision, upper.ran_here) == ("run", True), upper


@dataclass(frozen=True)
class Shared:
    output_path: str
    seconds: float = 0.0  # how long it takes


@dataclass(frozen=True)
class Logged:
    shared_path: str
    log: str
    name: str
    output_path: str


def make_shared(config: Shared) -> dict:
    time.sleep(config.seconds)
    with open_file(f"{config.output_path}/shared.txt", "w") as f:
        f.write("shared\n")
    return {}


def log_start_and_end(config: Logged) -> dict:
    with open(config.log, "a") as f:
        f.write(f"start {config.name}\n")
    time.sleep(0.2)  # several of the run loop's passes (it polls every 0.05 s where this runs)
    with open_file(f"{config.output_path}/out.txt", "w") as f:
        f.write(f"{config.name}\n")
    with open(config.log, "a") as f:
        f.write(f"end {config.name}\n")
    return {}


def test_copies_that_fall_back_to_running_keep_within_max_concurrent(tmp_path, monkeypatch):
    """x and y read `shared`; both copies are rejected (a changed byte), so both run here once
    `shared`, set aside, has been copied: under max_concurrent=1, one after the other."""
    import functools
    import shutil

    from executor.engine.run import execute

    monkeypatch.setattr(execute, "RunContext", functools.partial(execute.RunContext, poll_s=0.05))  # passes

    log = tmp_path / "log"
    shared = ExecutorStep("limit/shared", make_shared, Shared(this_output_path()))
    steps = [ExecutorStep(f"limit/{n}", log_start_and_end,
                          Logged(output_path_of(shared, "shared.txt"), str(log), n, this_output_path()))
             for n in ("x", "y")]
    a = tmp_path / "a"
    assert executor.run(steps, prefix=str(a), runner="inline", environ={}).ok
    damaged = tmp_path / "a-damaged"
    shutil.copytree(a, damaged)
    for name in ("x", "y"):
        (output_dir(damaged, f"limit/{name}") / "out.txt").write_text("changed\n")
    log.unlink()
    result = executor.run(steps, prefix=str(tmp_path / "b"), runner="inline", environ={}, max_concurrent=1,
                          cache_from=(str(damaged),))
    assert result.ok and result.step("limit/x").ran_here and result.step("limit/y").ran_here
    lines = log.read_text().split("\n")[:-1]
    assert [line.split()[0] for line in lines] == ["start", "end"] * 2, lines  # one at a time


_at_once = {"now": 0, "most": 0, "last_start": 0.0}
_at_once_lock = threading.Lock()


def count_at_once(config: Logged) -> dict:
    """Counts how many of these steps run at once (memory://: each step is a thread of this process).
    Each runs until no other has started for 0.3 s, so steps started in one burst all overlap."""
    with _at_once_lock:
        _at_once["now"] += 1
        _at_once["most"] = max(_at_once["most"], _at_once["now"])
        _at_once["last_start"] = time.monotonic()
    while time.monotonic() - _at_once["last_start"] < 0.3:
        time.sleep(0.02)
    with open_file(f"{config.output_path}/out.txt", "w") as f:
        f.write(f"{config.name}\n")
    with _at_once_lock:
        _at_once["now"] -= 1
    return {}


def test_copies_that_fall_back_to_running_keep_within_a_max_concurrent_above_256(tmp_path):
    """As above, with 258 copies rejected under max_concurrent=257 (shared's too: it runs here, and
    slowly, so all 258 wait for it and are ready at once): counts past the ints CPython keeps one
    copy of (up to 256) are compared by value too."""
    import fsspec

    shared = ExecutorStep("many/shared", make_shared, Shared(this_output_path(), seconds=0.5))
    steps = [ExecutorStep(f"many/x{i}", count_at_once, Logged(output_path_of(shared, "shared.txt"), "", f"x{i}",
                                                              this_output_path())) for i in range(258)]
    a, b = f"memory://cache-from-{tmp_path.name}/a", f"memory://cache-from-{tmp_path.name}/b"
    source = executor.run(steps, prefix=a, runner="inline", environ={}, max_concurrent=300)
    assert source.ok
    memory = fsspec.filesystem("memory")
    for step in source.steps:
        name = "shared.txt" if step.name == "many/shared" else "out.txt"
        memory.pipe(f"{step.output_path}/{name}", b"changed\n")  # every copy is rejected
    _at_once["most"] = 0
    result = executor.run(steps, prefix=b, runner="inline", environ={}, max_concurrent=257, cache_from=(a,))
    assert result.ok and sum(s.ran_here for s in result.steps) == 259
    assert _at_once["most"] == 257



@dataclass(frozen=True)
class Flagged:
    fail_flag: str  # the function fails while this file exists (the same config, so the same id, either way)
    output_path: str


def write_unless_flagged(config: Flagged) -> dict:
    if Path(config.fail_flag).exists():
        raise RuntimeError("failing on purpose")
    with open_file(f"{config.output_path}/out.txt", "w") as f:
        f.write("made\n")
    return {}


@dataclass(frozen=True)
class Reads:
    source_path: str
    output_path: str


def write_without_reading(config: Reads) -> dict:
    with open_file(f"{config.output_path}/out.txt", "w") as f:
        f.write("report\n")
    return {}


def test_a_copy_fallen_back_to_running_fails_when_the_step_it_waited_for_fails(tmp_path):
    """Both copies are rejected (a changed byte in each), so `report` falls back to running here and
    holds its lease while `made`, set aside, is made here first; `made` fails: `report` then fails
    as blocked by it, naming it, and its function never runs."""
    import shutil

    flag = tmp_path / "fail"
    made = ExecutorStep("fall/made", write_unless_flagged, Flagged(str(flag), this_output_path()))
    report = ExecutorStep("fall/report", write_without_reading, Reads(output_path_of(made, "out.txt"), this_output_path()))
    a, b = tmp_path / "a", tmp_path / "b"
    assert executor.run([report], prefix=str(a), runner="inline", environ={}).ok
    for name in ("fall/made", "fall/report"):
        (output_dir(a, name) / "out.txt").write_text("changed\n")  # the manifest no longer matches: rejected
    flag.touch()
    result = executor.run([report], prefix=str(b), runner="inline", environ={}, cache_from=(str(a),))
    assert not result.ok
    assert result.step("fall/made").status == "failed" and "failing on purpose" in result.step("fall/made").error
    blocked = result.step("fall/report")
    assert (blocked.status, blocked.error, blocked.ran_here) == ("failed", "dependency fall/made failed", False)
    assert not list(b.glob("fall/report-*/out.txt"))
    shutil.rmtree(b)
    flag.unlink()  # and without the failure, both run here
    again = executor.run([report], prefix=str(b), runner="inline", environ={}, cache_from=(str(a),))
    assert again.ok and {s.name: s.ran_here for s in again.steps} == {"fall/made": True, "fall/report": True}


@dataclass(frozen=True)
class Peek:
    version: int  # another version is another id: the step runs here instead of being copied
    output_path: str


def list_cache_from_outputs(config: Peek) -> dict:
    return {"found": executor.cache_from_outputs(config.output_path)}


def test_a_step_run_here_is_handed_the_run_s_cache_from_prefixes_and_none_without(tmp_path):
    """A step that runs (not copied) may take shard results from the --cache-from prefixes: the run
    hands it them (executor.cache_from_outputs: its own name's outputs there); without --cache-from
    it is handed none."""
    a, b = tmp_path / "a", tmp_path / "b"
    first = executor.run([ExecutorStep("peek/x", list_cache_from_outputs, Peek(1, this_output_path()))],
                         prefix=str(a), runner="inline", environ={})
    assert first.ok and record(a, "peek/x")["result"] == {"found": []}
    again = executor.run([ExecutorStep("peek/x", list_cache_from_outputs, Peek(2, this_output_path()))],
                         prefix=str(b), runner="inline", environ={}, cache_from=(str(a),))
    assert again.ok and again.step("peek/x").ran_here
    assert record(b, "peek/x")["result"] == {"found": [str(output_dir(a, "peek/x"))]}
