"""Execute paths no other test saw (each found by mutation testing, scripts/mutation.sh):

- a step whose config cannot be resolved into real paths (its own validation refuses the real
  output path) fails alone, recorded as "could not prepare the step", and the other steps run;
- a step whose lease another runner holds is announced once ("running elsewhere … waiting"), then
  the wait is reported as "no heartbeat for Ns", and the lease is taken over after the TTL; when
  that runner commits meanwhile, the step is done elsewhere (and the run, which ran nothing, ends
  cleanly), and a step reading it starts only then; a holder that renews gets no repeated notice
  until it falls silent; a step that lost the race for its lease announces the wait once; a step
  another runner failed meanwhile is reported failed elsewhere;
- a step forced with --force-run that another runner re-ran and committed after this run's plan
  is not run a second time ("completed by another runner");
- a step whose dependency re-runs is judged against its inputs once the dependency committed —
  unless another runner committed the step meanwhile: then that commit stands, not judged again;
- a step whose output place another step's status took after the plan fails alone, naming the
  digest found there (its first 16 hex digits) and touching nothing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import executor
from executor import ExecutorStep, output_path_of, this_output_path
from executor.cli import run
from executor.core.outcome import Outcome
from executor.core.record import Owner, State, Status, parse_status, status_key
from executor.engine.events import RunStarted, StepStarted, StepWaiting
from executor.tools.console_reporter import ConsoleReporter
from executor.engine.store.local import LocalStore, _generation
from tests.watch_clock import quick_takeovers


@dataclass(frozen=True)
class Picky:
    output_path: Any

    def __post_init__(self):  # passes on the placeholder, refuses the real path
        if isinstance(self.output_path, str) and not self.output_path.endswith(".zarr"):
            raise ValueError(f"output_path must end with .zarr, got {self.output_path!r}")


@dataclass(frozen=True)
class Plain:
    output_path: Any


def write_marker(config) -> dict:
    Path(config.output_path, "done.txt").write_text("ok")
    return {"ok": True}


def execute(steps, prefix: Path, *args: str, reporter=None) -> int:
    return run(steps, argv=["--prefix", str(prefix), "--runner", "inline", *args], main_file=__file__,
               reporter=reporter)


def status_of(prefix: Path, name: str) -> Status:
    [path] = prefix.glob(f"{name}-*/.executor/status.json")
    return parse_status(path.read_bytes(), str(path))


def test_a_step_that_cannot_be_prepared_fails_alone(tmp_path):
    steps = [ExecutorStep("picky", write_marker, Picky(this_output_path())),
             ExecutorStep("plain", write_marker, Plain(this_output_path()))]
    assert execute(steps, tmp_path) == 1
    picky = status_of(tmp_path, "picky")
    assert picky.state == State.FAILED
    assert picky.error.startswith("could not prepare the step: ValueError: output_path must end with .zarr"), picky.error
    assert status_of(tmp_path, "plain").state == State.SUCCESS
    assert not list(tmp_path.glob("picky-*/done.txt")), "the step function must not have run"


OTHER = Owner("someone-elses-run", "elsewhere", 4242, "someone")  # another runner


def held_elsewhere(step: ExecutorStep, prefix: Path, capsys) -> tuple[LocalStore, str, Status, dict]:
    """`step`'s lease, live, as another runner holds it: the store, the status key, that runner's
    RUNNING status, and the step's row in the dry-run plan."""
    assert execute([step], prefix, "--dry-run", "--json") == 0
    [row] = json.loads(capsys.readouterr().out)["steps"]
    store, key = LocalStore(str(prefix)), status_key(row["output_path"][len(str(prefix)) + 1:])
    running = Status(State.RUNNING, row["digest"], row["step_id"], 1, 1, OTHER, time.time(), started_at=time.time())
    assert store.create_if_absent(key, running.to_bytes()) is not None
    return store, key, running, row


def test_a_lease_held_elsewhere_is_announced_once_then_waited_on_then_taken_over(tmp_path, capsys, monkeypatch):
    step = ExecutorStep("held", write_marker, Plain(this_output_path()))
    _, _, _, row = held_elsewhere(step, tmp_path, capsys)

    quick_takeovers(monkeypatch)  # the watch's clock a second later at each look: taken over at the 4th
    reporter = ConsoleReporter(verbose_wait_s=0)  # every repeated notice printed (the real wait is short)
    assert execute([step], tmp_path, "--lease-ttl", "3", "--heartbeat-interval", "1", reporter=reporter) == 0
    out = capsys.readouterr().out
    assert out.count("running elsewhere (elsewhere pid 4242); waiting") == 1, out
    assert re.search(r"held: no heartbeat for \d+s of 3s before takeover", out), out
    assert status_of(tmp_path, "held").state == State.SUCCESS
    assert (Path(row["output_path"]) / "done.txt").read_text() == "ok"


@pytest.mark.parametrize("adopted", [False, True])
def test_a_step_another_runner_completes_while_this_run_waits_is_done_elsewhere(tmp_path, capsys, adopted):
    """The run waits on the other runner's lease and, when that runner commits, ends with the step
    done elsewhere: not run here, and this run ends cleanly although it ran nothing itself. Its
    report gives the committed output's path: the step's own, or the one it was adopted from."""
    step = ExecutorStep("held", write_marker, Plain(this_output_path()))
    store, key, running, row = held_elsewhere(step, tmp_path, capsys)

    def commit_when_waited_on(event) -> None:  # the other runner finishes while this run watches it
        if isinstance(event, StepWaiting):
            current = store.read(key)
            done = running.next(state=State.SUCCESS, written_at=time.time(), alias_of=alias)
            assert store.replace_if_generation(key, done.to_bytes(), current.generation) is not None

    alias = {"step_id": "held-0ld", "output_rel": "held-0ld", "reason": "same output", "declared_by": "t@h"}
    alias = alias if adopted else None
    result = executor.run([step], prefix=str(tmp_path), runner="inline", subscribers=[commit_when_waited_on])
    [report] = result.steps
    assert result.ok and report.status == Outcome.SUCCEEDED and not report.ran_here, report
    assert report.output_path == (str(tmp_path / "held-0ld") if adopted else row["output_path"]), report
    assert not (Path(row["output_path"]) / "done.txt").exists(), "this run ran the step itself"


@dataclass(frozen=True)
class Counted:
    output_path: Any
    calls_file: str


def count_call(config: Counted) -> dict:
    with open(config.calls_file, "a") as f:
        f.write("call\n")
    return {"ok": True}


@dataclass(frozen=True)
class Rewrites:
    output_path: Any
    prefix: str
    sorts: str = "below"  # where the other runner's new generation sorts against the planned one


def commit_b_as_another_runner(config: Rewrites) -> dict:
    """While this run goes on, "another runner" re-runs b and commits: a new SUCCESS of b whose
    generation sorts below (or above) the one this run planned from, so that an ordering compare
    (`<=`, `>`) in place of `==`/`!=` is caught either way. Does nothing unless b has succeeded before."""
    store = LocalStore(config.prefix)
    found = list(Path(config.prefix).glob("b-*/.executor/status.json"))
    if not found:
        return {"rewrote": False}
    key = str(found[0].relative_to(config.prefix))
    planned = store.read(key)
    status = json.loads(planned.data)
    if status["state"] != State.SUCCESS.value:
        return {"rewrote": False}
    for n in range(10_000):
        data = json.dumps({**status, "seq": status["seq"] + 1, "written_at": status["written_at"] + n + 1},
                          sort_keys=True, indent=1).encode()
        if (_generation(data) < planned.generation) == (config.sorts == "below"):
            break
    assert store.replace_if_generation(key, data, planned.generation) is not None
    return {"rewrote": True}


@pytest.mark.parametrize("sorts", ["below", "above"])
def test_a_forced_step_committed_meanwhile_by_another_runner_is_not_run_again(tmp_path, capsys, sorts):
    prefix, calls = tmp_path / "prefix", tmp_path / "b-calls.txt"
    steps = [ExecutorStep("a", commit_b_as_another_runner, Rewrites(this_output_path(), str(prefix), sorts)),
             ExecutorStep("b", count_call, Counted(this_output_path(), str(calls)))]
    assert execute(steps, prefix, "--max-concurrent", "1") == 0 and calls.read_text().count("call") == 1
    capsys.readouterr()
    # both forced, one at a time, in declaration order: a (which makes "another runner" commit b) first
    assert execute(steps, prefix, "--force-run", "^(a|b)$", "--max-concurrent", "1") == 0
    out = capsys.readouterr().out
    [record] = prefix.glob("a-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"rewrote": True}, "a did not run before b was decided"
    assert calls.read_text().count("call") == 1, "b ran again although another runner had just re-run it"
    assert "b (completed by another runner)" in out, out


@dataclass(frozen=True)
class CountedAfter:
    output_path: Any
    calls_file: str
    upstream: Any  # a's output: b is rechecked once a, re-running, has committed


@pytest.mark.parametrize("sorts", ["below", "above"])
def test_a_step_another_runner_committed_while_its_dependency_reran_is_not_judged_again(tmp_path, capsys,
                                                                                         sorts):
    prefix, calls = tmp_path / "prefix", tmp_path / "b-calls.txt"
    a = ExecutorStep("a", commit_b_as_another_runner, Rewrites(this_output_path(), str(prefix), sorts))
    b = ExecutorStep("b", count_call, CountedAfter(this_output_path(), str(calls), output_path_of(a)))
    assert execute([a, b], prefix) == 0 and calls.read_text().count("call") == 1
    capsys.readouterr()
    # a re-runs (same bytes) and, as it runs, "another runner" commits b: b is that runner's now
    assert execute([a, b], prefix, "--force-run", "^a$") == 0
    out = capsys.readouterr().out
    [record] = prefix.glob("a-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"rewrote": True}
    assert calls.read_text().count("call") == 1
    assert "b (completed by another runner)" in out, out
    assert "still current" not in out, out  # judged against this run's inputs, though not this run's


@dataclass(frozen=True)
class Squats:
    output_path: Any
    prefix: str
    digest: str = ""  # of the other step whose status it writes


def write_a_foreign_status_at_shared(config: Squats) -> dict:
    """As this run goes on, a status of some other step appears where b's output goes."""
    key = status_key("shared/b")
    status = Status(State.SUCCESS, config.digest, "other-step", seq=0, attempt=1, owner=None, written_at=1.0)
    assert LocalStore(config.prefix).create_if_absent(key, status.to_bytes()) is not None
    return {"squatted": key}


@pytest.mark.parametrize("foreign", ["0123456789abcdef" + "f" * 48, "fedcba9876543210" + "0" * 48],
                         ids=["sorts-before-b", "sorts-after-b"])
def test_a_status_of_another_step_found_where_a_step_would_start_fails_it_naming_that_digest(tmp_path, foreign):
    prefix = tmp_path / "prefix"
    a = ExecutorStep("a", write_a_foreign_status_at_shared, Squats(this_output_path(), str(prefix), foreign))
    b = ExecutorStep("b", write_marker, Plain(this_output_path()), override_output_path="shared/b")
    result = executor.run([a, b], prefix=str(prefix), runner="inline", max_concurrent=1)
    assert result.step("a").status == Outcome.SUCCEEDED
    assert result.step("b").status == Outcome.FAILED
    assert result.step("b").error == (f"could not start: ExecutorError: step 'b': {status_key('shared/b')} now "
                                      f"holds digest {foreign[:16]}…; refusing to touch it")
    found = prefix / status_key("shared/b")
    assert parse_status(found.read_bytes(), str(found)).digest == foreign  # untouched


def test_a_status_of_another_digest_found_where_a_mirrored_input_would_be_copied_fails_its_reader_naming_it(
        tmp_path):
    """The mirror copy's status key holds another digest once planned: the copy refuses (naming the digest
    found there, its first 16 hex digits) and touches nothing; the step reading the input fails saying so,
    its dependent is blocked, and the step that reads nothing mirrored runs."""
    from executor.engine.events import PlanMade
    from executor.engine.transfers.mirror import status_key as mirror_status_key
    from tests.cache.mirror_graph import CORPUS, build, write_corpus

    write_corpus(tmp_path / "us")
    prefix, key, foreign = tmp_path / "prefix", mirror_status_key("mirror/corpus-bucket/raw/corpus"), "0123456789abcdef" + "e" * 48

    def squat(event) -> None:
        if isinstance(event, PlanMade):
            theirs = Status(State.SUCCESS, foreign, "mirror/corpus-bucket/raw/corpus", 0, 1, OTHER, time.time())
            assert LocalStore(str(prefix)).create_if_absent(key, theirs.to_bytes()) is not None

    result = executor.run(build(), prefix=str(prefix), runner="inline", environ={}, subscribers=[squat],
                          mirror_sources=(str(tmp_path / "us"),))
    assert (result.step("mirrored/other").status, result.step("mirrored/total").status) == (
        Outcome.SUCCEEDED, Outcome.BLOCKED)
    assert result.step("mirrored/count").error == (f"could not start: ExecutorError: mirror {CORPUS}: {key} now "
                                                   f"holds digest {foreign[:16]}…; refusing to touch it")
    assert parse_status((prefix / key).read_bytes(), key).digest == foreign  # untouched
    assert not list((prefix / "mirror").rglob("*.txt"))  # nothing copied


def test_a_lease_this_run_itself_holds_is_taken_back_at_once_not_waited_on(tmp_path, capsys):
    """A RUNNING status this very run wrote (as after it lost its lease while paused past half the
    TTL) is taken back at once: no wait for the TTL, and no takeover reported."""
    step = ExecutorStep("ours", write_marker, Plain(this_output_path()))
    assert execute([step], tmp_path, "--dry-run", "--json") == 0
    [row] = json.loads(capsys.readouterr().out)["steps"]
    store, key = LocalStore(str(tmp_path)), status_key(row["output_path"][len(str(tmp_path)) + 1:])
    events: list = []

    def write_our_own_lease(event) -> None:
        events.append(event)
        if isinstance(event, RunStarted):
            here = Owner(event.run_id, "this-host", 1, "me")
            running = Status(State.RUNNING, row["digest"], row["step_id"], 1, 1, here, time.time(),
                             started_at=time.time())
            assert store.create_if_absent(key, running.to_bytes()) is not None

    result = executor.run([step], prefix=str(tmp_path), runner="inline", lease_ttl=3, heartbeat_interval=1,
                          subscribers=[write_our_own_lease])
    assert result.ok
    assert [e for e in events if isinstance(e, StepWaiting)] == []
    assert [(e.name, e.takeover) for e in events if isinstance(e, StepStarted)] == [("ours", False)]
    assert status_of(tmp_path, "ours").state == State.SUCCESS


def test_a_step_waits_for_a_dependency_another_runner_holds_until_that_runner_commits(tmp_path, capsys):
    """held is leased by another runner (which commits while this run watches it): reader, which
    reads held's output, starts only after held is done elsewhere, never while it is watched."""
    held = ExecutorStep("held", write_marker, Plain(this_output_path()))
    reader = ExecutorStep("reader", count_call, CountedAfter(this_output_path(), str(tmp_path / "calls"),
                                                             output_path_of(held)))
    prefix = tmp_path / "prefix"
    store, key, running, _ = held_elsewhere(held, prefix, capsys)
    seen: list[str] = []

    def note(event) -> None:
        seen.append(f"{type(event).__name__} {event.node.name}" if hasattr(event, "node") else type(event).__name__)
        if isinstance(event, StepWaiting):  # the other runner commits as soon as it is watched
            done = running.next(state=State.SUCCESS, written_at=time.time())
            assert store.replace_if_generation(key, done.to_bytes(), store.read(key).generation) is not None

    result = executor.run([held, reader], prefix=str(prefix), runner="inline", subscribers=[note])
    assert result.ok and not result.step("held").ran_here and result.step("reader").ran_here
    assert seen.index("StepStarted reader") > seen.index("StepFinished held"), seen


def fail_b_as_another_runner(config: Squats) -> dict:
    """As this run goes on, another runner runs b first, and b fails there."""
    b = ExecutorStep("b", write_marker, Plain(this_output_path()), override_output_path="shared/b")
    [row] = executor.plan([b], prefix=config.prefix, environ={}).steps
    failed = Status(State.FAILED, row.digest, row.step_id, seq=0, attempt=1,
                    owner=OTHER, written_at=1.0, error="boom")
    assert LocalStore(config.prefix).create_if_absent(status_key("shared/b"), failed.to_bytes()) is not None
    return {}


def test_a_step_another_runner_failed_meanwhile_is_reported_failed_elsewhere(tmp_path):
    prefix = tmp_path / "prefix"
    a = ExecutorStep("a", fail_b_as_another_runner, Squats(this_output_path(), str(prefix)))
    b = ExecutorStep("b", write_marker, Plain(this_output_path()), override_output_path="shared/b")
    ends: list = []
    result = executor.run([a, b], prefix=str(prefix), runner="inline", max_concurrent=1,
                          subscribers=[lambda e: ends.append(e) if type(e).__name__ == "StepFinished" else None])
    assert result.step("b").status == Outcome.FAILED and result.step("b").error == "failed in another runner: boom"
    assert [(e.node.name, e.outcome, e.elsewhere) for e in ends] == [("a", Outcome.SUCCEEDED, False),
                                                                     ("b", Outcome.FAILED, True)]
    assert not (prefix / "shared" / "b" / "done.txt").exists()  # not run here


def test_a_wait_on_a_holder_that_renews_repeats_no_notice_until_the_holder_falls_silent(tmp_path, capsys,
                                                                                         monkeypatch):
    """The other runner renews its lease twice (a new generation each time), then dies: after each
    renewal this run has seen no silence yet, so it says nothing more until there is some; then it
    takes the step over after the TTL."""
    quick_takeovers(monkeypatch, tick_s=0.5)  # the watch's clock half a second later at each look
    step = ExecutorStep("held", write_marker, Plain(this_output_path()))
    store, key, _, _ = held_elsewhere(step, tmp_path, capsys)
    waits: list[StepWaiting] = []

    def renew_twice(event) -> None:
        if isinstance(event, StepWaiting):
            waits.append(event)
            if len(waits) <= 2:
                current = store.read(key)
                renewed = parse_status(current.data, key).next(written_at=time.time())
                assert store.replace_if_generation(key, renewed.to_bytes(), current.generation) is not None

    result = executor.run([step], prefix=str(tmp_path), runner="inline", lease_ttl=2, heartbeat_interval=0.5,
                          subscribers=[renew_twice])
    assert result.ok and result.step("held").ran_here
    assert waits[0].first and all(w.silent_s > 0 for w in waits[1:]), [(w.first, w.silent_s) for w in waits]


def test_a_repeated_wait_notice_comes_at_the_first_silence_seen_however_short(tmp_path, capsys, monkeypatch):
    """Re-read every 0.05 s, a holder that stays silent gets its repeated notice at the first re-read
    that finds it silent (not only once a whole second has passed). The watch's clock is injected:
    its second look reads 0.1 s after the first, so that first silence is exactly 0.1 s, however loaded the
    machine; the next reads the whole TTL (2 s) after it, so the holder is then taken over."""
    import functools
    import itertools

    from executor.engine.run import execute as execute_module
    from executor.engine.run import lease as lease_module

    readings = itertools.chain([0.0, 0.1], itertools.repeat(2.0))
    monkeypatch.setattr(lease_module, "StalenessWatch",
                        functools.partial(lease_module.StalenessWatch, clock=lambda: next(readings)))
    monkeypatch.setattr(execute_module, "RunContext", functools.partial(execute_module.RunContext, poll_s=0.05))
    step = ExecutorStep("held", write_marker, Plain(this_output_path()))
    held_elsewhere(step, tmp_path, capsys)
    waits: list[StepWaiting] = []
    result = executor.run([step], prefix=str(tmp_path), runner="inline", lease_ttl=2, heartbeat_interval=0.5,
                          subscribers=[lambda e: waits.append(e) if isinstance(e, StepWaiting) else None])
    assert result.ok
    repeated = [w.silent_s for w in waits if not w.first]
    assert repeated and repeated[0] == pytest.approx(0.1), repeated


def test_a_holder_silent_for_exactly_the_ttl_is_taken_over(tmp_path, capsys, monkeypatch):
    """The watch's clock reads 0 when the other runner's lease is first seen, then exactly the TTL:
    that re-read takes the step over, with no further notice (a lease is stale at the TTL, not past it)."""
    import functools

    from executor.engine.run import lease as lease_module

    readings = iter([0.0, 2.0])
    monkeypatch.setattr(lease_module, "StalenessWatch", functools.partial(
        lease_module.StalenessWatch, clock=lambda: next(readings, 100.0)))
    step = ExecutorStep("held", write_marker, Plain(this_output_path()))
    held_elsewhere(step, tmp_path, capsys)
    events: list = []
    result = executor.run([step], prefix=str(tmp_path), runner="inline", lease_ttl=2, heartbeat_interval=0.5,
                          subscribers=[lambda e: events.append(e) if isinstance(e, (StepWaiting, StepStarted)) else None])
    assert result.ok and result.step("held").ran_here
    assert [(type(e).__name__, getattr(e, "silent_s", None), getattr(e, "takeover", None)) for e in events] == [
        ("StepWaiting", 0.0, None), ("StepStarted", None, True)]


def test_a_step_that_lost_the_race_for_its_lease_announces_the_wait_once(tmp_path, monkeypatch):
    """Another runner creates the status between this run's read and its create: the acquire loses
    (a normal outcome), the step watches, and its wait is announced once, as a first notice."""
    from executor.engine.run import lease as lease_module

    acquire = lease_module.LeaseKeeper.acquire

    def lose_the_first_race(self, key, status, current):
        if current is None and not raced:
            raced.append(key)
            theirs = dataclasses.replace(status, owner=OTHER, written_at=time.time())
            assert LocalStore(str(tmp_path)).create_if_absent(key, theirs.to_bytes()) is not None
        return acquire(self, key, status, current)

    raced: list[str] = []
    monkeypatch.setattr(lease_module.LeaseKeeper, "acquire", lose_the_first_race)
    quick_takeovers(monkeypatch, tick_s=0.25)  # the winner never renews: taken over at the 5th look, not after 1 s
    waits: list[StepWaiting] = []
    step = ExecutorStep("held", write_marker, Plain(this_output_path()))
    result = executor.run([step], prefix=str(tmp_path), runner="inline", lease_ttl=1, heartbeat_interval=0.25,
                          subscribers=[lambda e: waits.append(e) if isinstance(e, StepWaiting) else None])
    assert result.ok and result.step("held").ran_here and raced  # taken over after the TTL
    assert [w.first for w in waits][:1] == [True] and [w.first for w in waits].count(True) == 1, waits
