"""Mirrored inputs (issue 30.3) on local prefixes with the in-process runner: `mirrored(URL)` copied once
under the prefix from the first place that holds it, checked file by file, read by the step from there;
five runners at once make one copy; a changed file drops that source for the next; the dry run writes
nothing; an input found nowhere is a clear error; the one transfer budget (30.2) counts the mirror
copy before cache copies."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

import executor
from executor.engine.events import LogLine, MirrorCopied, PlanMade, StepStarted
from executor.engine.prefix.prefixes import open_prefix
from tests.cache import graph as cache_graph
from tests.cache.at_once import run_at_once
from tests.cache.mirror_graph import CORPUS, FILES, build, write_corpus
from tests.tools.toy import run_file, run_main

MIRROR = "mirror/corpus-bucket/raw/corpus"  # where the copy lands under the prefix
CORPUS_BYTES = sum(len(t) for t in FILES.values())


@pytest.fixture
def regions(tmp_path) -> tuple[Path, Path]:
    """Two folders holding the corpus under raw/corpus, standing for two regions' buckets."""
    us, eu = tmp_path / "us", tmp_path / "eu"
    write_corpus(us)
    write_corpus(eu)
    return us, eu


def run(prefix: Path, sources, **options):
    return executor.run(build(), prefix=str(prefix), runner="inline", environ={},
                        mirror_sources=tuple(str(s) for s in sources), **options)


def mirror_record(prefix: Path) -> dict:
    return json.loads((prefix / "mirror/.executor/corpus-bucket/raw/corpus/record.json").read_text())


def lines_of(events: list) -> list[str]:
    return [e.text for e in events if isinstance(e, LogLine)]


def test_the_step_reads_a_checked_copy_under_the_prefix_made_from_the_first_source_holding_it(regions, tmp_path):
    us, eu = regions
    prefix, events = tmp_path / "p", []
    result = run(prefix, [tmp_path / "nowhere", us, eu], subscribers=[events.append])
    assert result.ok, result.steps
    counted = executor.load_result(build()[0].config.count_path.step, prefix=str(prefix), environ={})
    assert counted == {"lines": 3000, "read_from": str(prefix / MIRROR)}
    for name, text in FILES.items():
        assert (prefix / MIRROR / name).read_text() == text
    record = mirror_record(prefix)
    assert (record["logical"], record["source"]) == (CORPUS, f"{us}/raw/corpus")
    assert {e["path"]: e["checksum"]["algorithm"] for e in record["manifest"]} == dict.fromkeys(FILES, "sha256")
    assert [line for line in lines_of(events) if "copying" in line] == [
        f"mirror {CORPUS}: copying {CORPUS_BYTES / 1024:.1f} KiB (2 files) from {us}/raw/corpus"]
    # complete under the prefix: planned as such (nothing to copy, nothing counted), and a step run again
    # reading it uses the copy, though the source has changed since
    (us / "raw/corpus/part-0.txt").unlink()
    [planned] = executor.plan(build(), prefix=str(prefix), force_run="mirrored/count", environ={},
                              mirror_sources=(str(us),)).plan.mirrors.values()
    assert planned.complete and planned.bytes_to_copy == 0 and planned.describe().endswith(f"complete at {MIRROR}")
    events.clear()
    other = executor.run(build(), prefix=str(prefix), runner="inline", environ={}, subscribers=[events.append],
                         force_run="mirrored/count", mirror_sources=(str(us),))
    assert other.ok and not [line for line in lines_of(events) if line.startswith("mirror ")], lines_of(events)
    assert mirror_record(prefix)["run_id"] == result.run_id


def test_five_runners_at_once_make_one_copy_and_all_succeed(regions, tmp_path):
    us, _ = regions
    prefix, events = tmp_path / "p", []
    results = run_at_once(5, lambda: run(prefix, [us], subscribers=[events.append], lease_ttl=20,
                                         heartbeat_interval=2))
    assert len(results) == 5 and all(r.ok for r in results), [r.steps for r in results]
    copying = [line for line in lines_of(events) if line.startswith(f"mirror {CORPUS}: copying")]
    assert len(copying) == 1, lines_of(events)  # one copy, by one runner
    assert mirror_record(prefix)["run_id"] in {r.run_id for r in results}
    started = sorted(e.node.name for e in events if isinstance(e, StepStarted))
    assert started == ["mirrored/count", "mirrored/other", "mirrored/total"]  # each step once, too


def test_what_a_copy_that_never_finished_left_is_removed_before_copying(regions, tmp_path):
    """A runner died mid-copy: files under the copy's path, no SUCCESS. They are not the input's."""
    prefix = tmp_path / "p"
    leftover = prefix / MIRROR / "part-9.txt"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("not part of the corpus\n" * 7)
    result = run(prefix, [regions[0]])
    assert result.ok and not leftover.exists()
    assert executor.load_result(build()[0].config.count_path.step, prefix=str(prefix), environ={})["lines"] == 3000


def test_planning_a_local_source_reads_no_bytes_and_the_copy_records_their_sha256(regions, tmp_path, monkeypatch):
    """Planning lists a local source's files (size, mtime) without opening one; the copy hashes what it
    streams, and the record holds those sha256s."""
    import hashlib

    from fsspec.implementations.local import LocalFileSystem

    us, eu = regions
    opened: list[str] = []
    real_open = LocalFileSystem._open
    monkeypatch.setattr(LocalFileSystem, "_open", lambda self, path, mode="rb", **kw: (
        opened.append(str(path)), real_open(self, path, mode, **kw))[1])
    planned = executor.plan(build(), prefix=str(tmp_path / "p"), environ={}, mirror_sources=(str(us), str(eu)))
    [mirror] = planned.plan.mirrors.values()
    assert [c.url for c in mirror.candidates] == [f"{us}/raw/corpus", f"{eu}/raw/corpus"]
    assert mirror.bytes_to_copy == CORPUS_BYTES
    assert not [p for p in opened if p.startswith((str(us), str(eu)))], opened
    monkeypatch.undo()
    prefix = tmp_path / "p"
    assert run(prefix, [us]).ok
    assert {e["path"]: e["checksum"] for e in mirror_record(prefix)["manifest"]} == {
        name: {"algorithm": "sha256", "value": hashlib.sha256(text.encode()).hexdigest()}
        for name, text in FILES.items()}


def test_a_source_with_a_changed_file_is_refused_and_the_next_source_used(regions, tmp_path):
    """The plan listed the local file's size and mtime; it is rewritten (same size) before the copy: the stat
    after copying differs, so that source is dropped and the next one used."""
    us, eu = regions
    damaged = us / "raw/corpus/sub/part-1.txt"

    def damage_after_planning(event) -> None:  # the plan listed it intact; one byte changes before the copy
        if isinstance(event, PlanMade):
            listed = damaged.stat().st_mtime_ns
            data = bytearray(damaged.read_bytes())
            data[100] ^= 0x01
            damaged.write_bytes(bytes(data))
            os.utime(damaged, ns=(listed + 10**9, listed + 10**9))  # a coarse clock: still one second later

    prefix, events = tmp_path / "p", []
    result = run(prefix, [us, eu], subscribers=[damage_after_planning, events.append])
    assert result.ok, result.steps
    assert mirror_record(prefix)["source"] == f"{eu}/raw/corpus"
    warned = [e.text for e in events if isinstance(e, LogLine) and e.level == "warning"]
    assert any(f"not copied from {us}/raw/corpus: SourceRejected: sub/part-1.txt: changed since it was listed" in w
               for w in warned), warned
    assert (prefix / MIRROR / "sub/part-1.txt").read_text() == FILES["sub/part-1.txt"]


def test_with_every_source_damaged_the_readers_fail_and_the_rest_runs(regions, tmp_path):
    us, _ = regions
    damaged = us / "raw/corpus/part-0.txt"
    prefix = tmp_path / "p"
    result = run(prefix, [us], subscribers=[lambda e: isinstance(e, PlanMade) and damaged.write_text("x" * 5)])
    outcome = {s.name: (str(s.status), s.error) for s in result.steps}
    assert outcome["mirrored/other"] == ("succeeded", None)
    assert outcome["mirrored/count"][0] == "failed" and outcome["mirrored/total"][0] == "blocked"
    assert f"mirrored input {CORPUS}: no source could be used" in outcome["mirrored/count"][1]
    assert "part-0.txt: 5 bytes, the manifest says 19000" in outcome["mirrored/count"][1]
    assert not [p for p in (prefix / "mirror").rglob("*.txt")]  # nothing half-copied is left


def test_an_input_found_in_no_source_is_an_error_naming_step_field_url_and_places_tried(tmp_path):
    with pytest.raises(executor.ExecutorError) as caught:
        run(tmp_path / "p", [tmp_path / "a", tmp_path / "b"])
    message = str(caught.value)
    assert f"mirrored input {CORPUS}, read by mirrored/count (corpus), was found in no source" in message
    for place in (CORPUS, f"{tmp_path}/a/raw/corpus", f"{tmp_path}/b/raw/corpus"):
        assert f"{place} (nothing there)" in message
    assert "--mirror-sources" in message and not (tmp_path / "p").exists()


EXPERIMENT = '''\
from executor import executor_main
from tests.cache.mirror_graph import build

if __name__ == "__main__":
    executor_main(steps=build())
'''


def test_dry_run_shows_the_copy_with_sources_and_size_and_writes_nothing(regions, tmp_path):
    us, eu = regions
    path, prefix = tmp_path / "exp.py", tmp_path / "p"
    path.write_text(EXPERIMENT)
    code, out = run_file(path, "--prefix", str(prefix), "--mirror-sources", str(us), "--mirror-sources", str(eu),
                         "--dry-run")
    flat = " ".join(out.split())
    assert code == 0, out
    assert (f"mirror {CORPUS}: copy {CORPUS_BYTES / 1024:.1f} KiB (2 files) from {us}/raw/corpus (also at "
            f"{eu}/raw/corpus) to {MIRROR}") in flat, out
    code, out, err = run_file(path, "--prefix", str(prefix), "--mirror-sources", f"{us},{eu}", "--dry-run",
                              "--json", split=True)
    assert code == 0, err
    [mirror] = json.loads(out)["mirrors"]
    assert "a run would be refused" not in err
    assert (mirror["logical"], mirror["bytes"], mirror["complete"]) == (CORPUS, CORPUS_BYTES, False)
    assert [s["url"] for s in mirror["sources"]] == [f"{us}/raw/corpus", f"{eu}/raw/corpus"]
    code, out = run_file(path, "--prefix", str(prefix), "--mirror-sources", str(us), "--dry-run",
                         "--transfer-budget-gb", "0.00005")  # what a run would refuse is said, still exit 0
    assert code == 0 and "a run would be refused: transfers of 59.6 KiB exceed the budget of 5e-05 GB" in \
        " ".join(out.split()), out
    assert not prefix.exists()


def test_the_run_file_the_report_and_the_console_show_each_mirror_copy(regions, tmp_path):
    """The command line prints one line per mirrored input from its event (the library prints nothing); the
    run file lists it (copied: source, bytes, files, seconds; or already complete), the report's table shows it."""
    import re

    us, _ = regions
    path, prefix = tmp_path / "exp.py", tmp_path / "p"
    path.write_text(EXPERIMENT)
    for force, how in (((), "copied"), (("--force-run", "mirrored/count"), "already complete")):
        code, out = run_file(path, "--prefix", str(prefix), "--runner", "inline", "--mirror-sources", str(us), *force)
        flat = " ".join(out.split())
        assert code == 0, out
        [mirror] = json.loads(next((prefix / "runs").glob(f"*{_run_id(flat)}.json")).read_text())["mirrors"]
        assert (mirror["logical"], mirror["path"], mirror["how"]) == (CORPUS, MIRROR, how)
        report = Path(re.search(r"report: (\S+\.html)", flat).group(1)).read_text()
        [row] = re.findall(r'<tr class="mirror">.*?</tr>', report)
        assert CORPUS in row and f"<td>{how}</td>" in row, row
        if how == "copied":
            assert (mirror["source"], mirror["bytes"], mirror["files"]) == (f"{us}/raw/corpus", CORPUS_BYTES, 2)
            assert mirror["seconds"] >= 0 and f"{us}/raw/corpus" in row and "2 files" in row
            assert (f"mirror {CORPUS}: copied from {us}/raw/corpus and checked ({CORPUS_BYTES / 1024:.1f} KiB, "
                    f"2 files, in") in flat, out
        else:
            assert mirror["source"] is None and f"mirror {CORPUS}: already complete at {MIRROR}" in flat, out
    code, out = run_main("status", "--prefix", str(prefix))  # the copy's state and where it came from
    assert code == 0, out
    assert (f"{CORPUS}  SUCCESS  from {us}/raw/corpus, {CORPUS_BYTES / 1024:.1f} KiB in 2 files, run "
            f"{mirror_record(prefix)['run_id']}  -> {MIRROR}") in out, out


def _run_id(console: str) -> str:
    import re

    return re.search(r"run record: \S+-([0-9a-z-]+?)\.json", console).group(1)


def test_a_cache_copy_that_falls_back_to_running_gets_its_mirrored_input_then(regions, tmp_path):
    """The steps reading the mirrored input are copied from a cache-from prefix, so the plan copies no
    mirror; both sources turn out damaged, the step runs here, and its input is copied just before."""
    us, _ = regions
    a, b, events = tmp_path / "a", tmp_path / "b", []
    assert run(a, [us]).ok
    for name, output in (("count", "count.txt"), ("total", "total.txt")):
        [path] = a.glob(f"mirrored/{name}-*/{output}")
        path.write_text(path.read_text() + "changed\n")
    result = run(b, [us], cache_from=(str(a),), subscribers=[events.append])
    assert result.ok, result.steps
    assert result.step("mirrored/count").ran_here and result.step("mirrored/total").ran_here
    said = lines_of(events)
    assert f"mirrored/count: obtaining mirrored inputs the plan did not copy: {CORPUS}" in said, said
    assert mirror_record(b)["source"] == f"{us}/raw/corpus"


def test_an_unplanned_mirror_copy_counts_against_the_transfer_budget(regions, tmp_path):
    """As above, the plan copies no mirror (the steps are cache copies of a few bytes); the copies fall back to
    running, and the mirrored input they then need (59.6 KiB) is over the 50 kB budget: refused with the
    sizes, its reader fails, nothing is copied. With 100 kB it is copied."""
    us, _ = regions
    a = tmp_path / "a"
    assert run(a, [us]).ok
    for name, output in (("count", "count.txt"), ("total", "total.txt")):
        [path] = a.glob(f"mirrored/{name}-*/{output}")
        path.write_text(path.read_text() + "changed\n")
    b = tmp_path / "b"
    result = run(b, [us], cache_from=(str(a),), transfer_budget_gb=0.00005)
    count = result.step("mirrored/count")
    assert (count.decision, str(count.status)) == ("copy", "failed"), result.steps
    assert (f"mirrored input {CORPUS}: not copied: copying mirrored input {CORPUS} ({CORPUS_BYTES / 1024:.1f} KiB) "
            f"would take the transfer budget past 5e-05 GB (") in count.error, count.error
    assert "already counted in this run); raise it with --transfer-budget-gb" in count.error, count.error
    assert result.step("mirrored/total").error == "dependency mirrored/count failed"
    assert not list((b / "mirror").rglob("*.txt"))
    again = run(b, [us], cache_from=(str(a),), transfer_budget_gb=0.0001)
    assert again.ok and mirror_record(b)["source"] == f"{us}/raw/corpus", again.steps


def test_the_environment_variable_names_the_sources(regions, tmp_path):
    planned = executor.plan(build(), prefix=str(tmp_path / "p"), environ={"EXECUTOR_MIRROR_SOURCES": f"{regions[1]},"})
    [mirror] = planned.plan.mirrors.values()
    assert mirror.candidates[0].url == f"{regions[1]}/raw/corpus"


def test_one_budget_the_mirror_copy_is_reserved_and_the_cache_copy_over_it_is_not_made(regions, tmp_path):
    """A 1 MiB cache copy and a 60 KiB mirror copy against a 1.05 MB budget: each fits alone, not both.
    The mirrored input is needed for its step to run, so it is counted first; the copy is refused."""
    a = tmp_path / "a"
    assert executor.run(cache_graph.build(), prefix=str(a), runner="inline", environ={}).ok
    b = tmp_path / "b"
    result = executor.run([*cache_graph.build(), *build()], prefix=str(b), runner="inline", environ={},
                          cache_from=(str(a),), mirror_sources=(str(regions[0]),), transfer_budget_gb=0.00105)
    assert result.ok, result.steps
    report = result.step("cache/report")
    assert (report.decision, report.ran_here) == ("run", True)
    assert "not copied: 1.0 MiB from" in report.reason and "would take the transfer budget past 0.00105 GB" in \
        report.reason and f"{CORPUS_BYTES / 1024:.1f} KiB of it for mirrored inputs and cross-region reads" in report.reason, report.reason
    assert result.step("cache/notes").decision == "copy"  # small: still within the budget
    assert mirror_record(b)["source"] == f"{regions[0]}/raw/corpus"


def test_a_mirrored_input_over_the_budget_is_refused_before_anything_runs(regions, tmp_path):
    prefix = tmp_path / "p"
    with pytest.raises(executor.ExecutorError) as caught:
        run(prefix, [regions[0]], transfer_budget_gb=0.00005)
    message = str(caught.value)
    assert (f"transfers of {CORPUS_BYTES / 1024:.1f} KiB exceed the budget of 5e-05 GB (mirrored inputs "
            f"{CORPUS_BYTES / 1024:.1f} KiB ({CORPUS})); nothing was started") in message, message
    assert "--transfer-budget-gb" in message
    assert not (prefix / "mirror").exists() and not (prefix / "runs").exists()
    assert run(prefix, [regions[0]], transfer_budget_gb=0.0001).ok  # raised: it runs


def test_the_id_is_the_logical_url_whatever_the_sources():
    """Hashed as the URL string itself: the same id as the plain string, with or without sources."""
    from dataclasses import replace

    from executor.core.graph import build_graph

    def count_id(steps) -> str:
        [node] = [n for n in build_graph(steps).nodes.values() if n.name == "mirrored/count"]
        return node.step_id

    mirrored_steps = build()
    count = mirrored_steps[0].config.count_path.step
    plain = replace(count, config=replace(count.config, corpus=CORPUS))
    assert count_id(mirrored_steps) == count_id([plain])
    assert count_id(build("memory://corpus-bucket/raw/other")) != count_id(mirrored_steps)


def test_every_step_reading_a_shared_config_knows_its_mirrored_input():
    """Found while hashing (no second walk): a config object shared by two steps is encoded once, yet
    both steps are told of the mirrored input it holds."""
    from executor import ExecutorStep, this_output_path
    from executor.core.graph import build_graph
    from tests.cache.mirror_graph import CountConfig, count_lines

    shared = CountConfig(executor.mirrored(CORPUS), this_output_path())
    steps = [ExecutorStep(f"mirrored/count-{i}", count_lines, shared) for i in range(2)]
    nodes = build_graph([*steps, *build()[1:]]).nodes.values()
    assert {n.name: n.mirrored for n in nodes} == {"mirrored/count-0": (CORPUS,), "mirrored/count-1": (CORPUS,),
                                                   "mirrored/other": ()}


def test_a_single_file_is_mirrored_as_that_file(regions, tmp_path):
    one = f"{CORPUS}/sub/part-1.txt"
    prefix = tmp_path / "p"
    result = executor.run(build(one), prefix=str(prefix), runner="inline", environ={},
                          mirror_sources=(str(regions[0]),))
    assert result.ok, result.steps
    copy = prefix / "mirror/corpus-bucket/raw/corpus/sub/part-1.txt"
    assert copy.is_file() and copy.read_text() == FILES["sub/part-1.txt"]
    counted = executor.load_result(build(one)[0].config.count_path.step, prefix=str(prefix), environ={})
    assert counted == {"lines": 2000, "read_from": str(copy)}
    record = json.loads((prefix / "mirror/.executor/corpus-bucket/raw/corpus/sub/part-1.txt/record.json").read_text())
    assert record["source"] == f"{regions[0]}/raw/corpus/sub/part-1.txt" and len(record["manifest"]) == 1


RUNNER = '''\
import json, pathlib, sys, time
import executor
from executor.engine.events import LogLine
from tests.cache.mirror_graph import build

gate = pathlib.Path(sys.argv[3])  # imports done: wait for the others, so the five plan and copy at once
(gate / f"ready-{sys.argv[4]}").touch()
while not (gate / "go").exists():
    time.sleep(0.01)
said = []
result = executor.run(build(), prefix=sys.argv[1], runner="inline", environ={}, mirror_sources=(sys.argv[2],),
                      subscribers=[lambda e: isinstance(e, LogLine) and said.append(e.text)], lease_ttl=20,
                      heartbeat_interval=2)
print(json.dumps({"ok": result.ok, "said": said}))
'''


def test_five_runner_processes_at_once_make_one_copy_and_all_succeed(regions, tmp_path):
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[2]
    prefix, gate = tmp_path / "p", tmp_path / "gate"
    gate.mkdir()
    runners = [subprocess.Popen([sys.executable, "-c", RUNNER, str(prefix), str(regions[0]), str(gate), str(i)],
                                cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(5)]
    deadline = time.monotonic() + 120
    while len(list(gate.glob("ready-*"))) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    (gate / "go").touch()
    ended = [(r.communicate(timeout=300), r.returncode) for r in runners]
    assert all(code == 0 for _, code in ended), ended
    reports = [json.loads(out.strip().splitlines()[-1]) for (out, _), _ in ended]
    assert all(r["ok"] for r in reports), reports
    copying = [line for r in reports for line in r["said"] if line.startswith(f"mirror {CORPUS}: copying")]
    assert len(copying) == 1, reports  # one process copied; the others waited for it or found it done
    assert (prefix / MIRROR / "sub/part-1.txt").read_text() == FILES["sub/part-1.txt"]


def _held_by_another_runner(prefix: Path):
    """The mirror copy's lease, taken by a runner of another run (as its first write would be)."""
    import time

    from executor.core.record import Owner, State, Status
    from executor.engine.transfers.mirror import mirror_digest, status_key
    from executor.engine.store.local import LocalStore

    store, key = LocalStore(str(prefix)), status_key(MIRROR)
    status = Status(State.RUNNING, mirror_digest(CORPUS), MIRROR, seq=0, attempt=1,
                    owner=Owner("other-run", "elsewhere", 1, "someone"), written_at=time.time(), started_at=time.time())
    assert store.create_if_absent(key, status.to_bytes()) is not None
    return store, key, status


def test_a_runner_waits_for_the_copy_another_runner_holds_and_uses_it(regions, tmp_path):
    """Deterministic: the lease is held (and kept fresh) by another run; this run says it waits, copies
    nothing, and reads the copy once the holder commits SUCCESS."""
    import shutil
    import time

    from executor.core.record import State

    prefix, events, results = tmp_path / "p", [], []
    store, key, status = _held_by_another_runner(prefix)
    runner = threading.Thread(target=lambda: results.append(run(prefix, [regions[0]], subscribers=[events.append],
                                                                lease_ttl=20, heartbeat_interval=2)))
    runner.start()
    deadline = time.monotonic() + 120
    while not any("waiting for it" in line for line in lines_of(events)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(line.startswith(f"mirror {CORPUS}: being copied (lease held by elsewhere pid 1 (run other-run)")
               for line in lines_of(events)), lines_of(events)
    shutil.copytree(regions[0] / "raw/corpus", prefix / MIRROR)  # the holder's copy, then its fenced commit
    current = store.read(key)
    assert store.replace_if_generation(key, status.next(state=State.SUCCESS).to_bytes(), current.generation)
    runner.join(timeout=120)
    assert results and results[0].ok, results
    assert not [line for line in lines_of(events) if "copying" in line]
    assert [(e.how, e.source) for e in events if isinstance(e, MirrorCopied)] == [("copied by another runner", None)]
    assert [m["how"] for m in json.loads(Path(results[0].run_file).read_text())["mirrors"]] == [
        "copied by another runner"]


def test_a_mirrored_input_slow_to_arrive_does_not_hold_up_a_step_that_does_not_read_it(regions, tmp_path):
    """The mirrored input is a job the loop schedules, not a wait before the run: while another runner
    holds its copy (renewing nothing, but far inside the TTL: never taken over here), the step reading nothing mirrored starts
    and commits; only then is the copy committed (by the test, as the holder), and its readers run."""
    import shutil

    from executor.core.outcome import Outcome
    from executor.core.record import State
    from executor.engine.events import StepFinished

    prefix, events, results = tmp_path / "p", [], []
    store, key, status = _held_by_another_runner(prefix)
    other_done = threading.Event()

    def watch(event) -> None:
        events.append(event)
        if isinstance(event, StepFinished) and event.name == "mirrored/other" and event.outcome == Outcome.SUCCEEDED:
            other_done.set()

    runner = threading.Thread(target=lambda: results.append(run(prefix, [regions[0]], subscribers=[watch],
                                                                lease_ttl=600, heartbeat_interval=2)))
    runner.start()
    other_done.wait(timeout=120)  # a loop blocked on the mirror never gets here: the order below fails
    shutil.copytree(regions[0] / "raw/corpus", prefix / MIRROR)  # the holder's copy, then its fenced commit
    assert store.replace_if_generation(key, status.next(state=State.SUCCESS).to_bytes(), store.read(key).generation)
    runner.join(timeout=120)
    assert results and results[0].ok, results
    order = [(type(e).__name__, getattr(e, "name", None)) for e in events
             if isinstance(e, (StepStarted, StepFinished, MirrorCopied))]
    assert order.index(("StepFinished", "mirrored/other")) < order.index(("MirrorCopied", None)) \
        < order.index(("StepStarted", "mirrored/count")), order
    assert [(e.how, e.source) for e in events if isinstance(e, MirrorCopied)] == [("copied by another runner", None)]


def test_a_copy_whose_holder_went_silent_is_taken_over_after_the_ttl(regions, tmp_path):
    prefix, events = tmp_path / "p", []
    _held_by_another_runner(prefix)  # never renewed: stale after the TTL, on this runner's own clock
    result = run(prefix, [regions[0]], subscribers=[events.append], lease_ttl=2, heartbeat_interval=0.5)
    assert result.ok, result.steps
    said = lines_of(events)
    assert any("waiting for it" in line for line in said) and any("copying" in line for line in said), said
    assert mirror_record(prefix)["run_id"] == result.run_id


def test_a_copy_taken_over_counts_against_the_transfer_budget(regions, tmp_path):
    """Planned as another runner's copy (nothing counted), taken over after the TTL: counted then, and
    refused past a 50 kB budget, with the sizes."""
    prefix = tmp_path / "p"
    _held_by_another_runner(prefix)
    result = run(prefix, [regions[0]], lease_ttl=2, heartbeat_interval=0.5, transfer_budget_gb=0.00005)
    count = result.step("mirrored/count")
    assert str(count.status) == "failed" and result.step("mirrored/other").ran_here, result.steps
    assert (f"copying mirrored input {CORPUS} ({CORPUS_BYTES / 1024:.1f} KiB) would take the transfer budget past "
            f"5e-05 GB (0 B already counted in this run)") in count.error, count.error
    assert not list((prefix / "mirror").rglob("*.txt"))


def test_an_interrupted_copy_releases_its_lease_and_the_next_run_copies_it(regions, tmp_path):
    """Ctrl-C while the copy runs (raised here by the run's own event): the run ends interrupted, no step
    started, the copy's lease is released FAILED with the reason; the next run retries it and succeeds."""
    from executor.core.record import State, parse_status
    from executor.engine.transfers.mirror import status_key

    def interrupt_on_copy(event) -> None:
        if isinstance(event, LogLine) and event.text.startswith(f"mirror {CORPUS}: copying"):
            raise KeyboardInterrupt

    prefix, events = tmp_path / "p", []
    interrupted = run(prefix, [regions[0]], subscribers=[events.append, interrupt_on_copy])
    assert interrupted.interrupted and not any(isinstance(e, StepStarted) for e in events)
    status = parse_status((prefix / status_key(MIRROR)).read_bytes(), "mirror status")
    assert status.state == State.FAILED and "interrupted" in status.error, status
    again = run(prefix, [regions[0]])
    assert again.ok and mirror_record(prefix)["run_id"] == again.run_id


def test_a_mirrored_input_is_no_cross_region_read():
    """The step reads the copy under the prefix, so the guard does not count the logical bucket; the
    same URL as a plain string is a read from another bucket."""
    from dataclasses import replace

    from executor.core.graph import build_graph
    from executor.core.plan import PlanOptions, plan_steps
    from executor.engine.transfers.regions import _inputs_elsewhere

    logical = "s3://corpus-elsewhere/raw/corpus"
    mirrored_steps = build(logical)
    count = mirrored_steps[0].config.count_path.step
    plain = replace(count, config=replace(count.config, corpus=logical))
    for steps, expected in ((mirrored_steps, []), ([plain], [("mirrored/count", logical)])):
        plan = plan_steps(build_graph(steps), {}, PlanOptions())
        assert list(_inputs_elsewhere(plan, "s3://runs/prefix")) == expected


def test_gc_and_verify_take_no_mirror_for_a_step_output(regions, tmp_path):
    """mirror/.executor/ holds the copies' statuses, no step's: gc never lists `mirror` as one output to
    delete (which would take every copy, and any step output below it), verify checks only the steps."""
    from executor.tools.gc import list_outputs
    from executor.tools.verify import verify_path

    prefix = tmp_path / "p"
    assert run(prefix, [regions[0]]).ok
    assert sorted(o.rel.split("-")[0] for o in list_outputs(open_prefix(str(prefix)))) == [
        "mirrored/count", "mirrored/other", "mirrored/total"]
    checked = verify_path(open_prefix(str(prefix)))
    assert len(checked) == 3 and all(v.ok and v.verified for v in checked), [v.render() for v in checked]


def test_with_max_concurrent_1_a_mirror_copy_and_a_step_never_run_at_the_same_time(regions, tmp_path):
    """A mirror copy takes a --max-concurrent slot like a step: with one slot, the copy (from its
    "copying" line to its MirrorCopied) and each step (StepStarted to StepFinished) never overlap."""
    from executor.engine.events import StepFinished

    events: list = []
    result = run(tmp_path / "p", [regions[0]], subscribers=[events.append], max_concurrent=1)
    assert result.ok, result.steps
    running, overlaps = set(), []
    for e in events:
        if isinstance(e, LogLine) and e.text.startswith(f"mirror {CORPUS}: copying"):
            what = "mirror"
        elif isinstance(e, (StepStarted, StepFinished)):
            what = e.name
        elif isinstance(e, MirrorCopied) and e.how == "copied":
            what = "mirror"
        else:
            continue
        starts = isinstance(e, (LogLine, StepStarted))
        if starts and running:
            overlaps.append((what, sorted(running)))
        (running.add if starts else running.discard)(what)
    assert [e.how for e in events if isinstance(e, MirrorCopied)] == ["copied"]
    assert not overlaps, overlaps
