"""scripts/mutation.py's scoring rules: a timeout is not a kill, a crash is an error, a target whose
unmutated tests fail or run past half the timeout gets no score, and an equivalent needs a reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from mutation_outcomes import (TARGETS, Baseline, Mutant, Outcome, Target, TargetScore, classify, list_mutants,  # noqa: E402
                               load_equivalents, module_files, module_shas, reclassify, render_report,
                               score_from_json, score_session, score_to_json, session_progress, unsettled)

EQUIVALENTS = REPO / "scripts" / "mutation" / "equivalent.json"
TO_RE_DECIDE = REPO / "scripts" / "mutation" / "to-re-decide.json"
RESULTS = REPO / "scripts" / "mutation" / "results"
REPORT = REPO / "scripts" / "mutation" / "report.md"


def test_cosmic_ray_results_are_classified_with_timeouts_and_crashes_apart():
    assert classify("normal", "killed", "1 failed") is Outcome.KILLED
    assert classify("normal", "killed", "timeout") is Outcome.TIMED_OUT
    hung = "FAILED test_calc.py::test_double - Failed: Timeout (>30.0s) from pytest-timeout.\n1 failed"
    assert classify("normal", "killed", hung) is Outcome.TIMED_OUT  # a test past Target.hang_s
    assert classify("normal", "survived", "5 passed") is Outcome.SURVIVED
    assert classify("normal", "incompetent", "") is Outcome.ERROR
    assert classify("exception", None, "Traceback") is Outcome.ERROR
    assert classify("abnormal", "killed", "") is Outcome.ERROR
    assert classify("skipped", None, "not sampled") is Outcome.SKIPPED


def _session(tmp_path: Path, module: Path, results: dict[int, tuple[str, str | None, str]]) -> Path:
    """A real cosmic-ray work database: the module's mutants, some of them given results."""
    from cosmic_ray.commands.init import init
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    session = tmp_path / "session.sqlite"
    with use_db(str(session)) as db:
        init([module], db, {})
        items = sorted(db.pending_work_items, key=lambda i: (i.mutations[0].operator_name, i.mutations[0].occurrence))
        for index, (worker, test, output) in results.items():
            db.set_result(items[index].job_id, WorkResult(
                worker_outcome=WorkerOutcome(worker), test_outcome=TestOutcome(test) if test else None,
                output=output, diff=f"--- a\n+++ b\n@@ -1 +1 @@\n-old\n+mutated line {index}"))
    return session


def test_a_session_is_scored_without_counting_timeouts_or_errors_as_kills(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text("def f(a, b):\n    return a + b if a < b else a - b\n")
    session = _session(tmp_path, module, {0: ("normal", "killed", "1 failed"), 1: ("normal", "killed", "timeout"),
                                          2: ("normal", "survived", "ok"), 3: ("abnormal", None, ""),
                                          4: ("normal", "survived", "ok")})
    target = Target("toy", (str(module),), ("tests/none.py",), 100.0)
    equivalent = {"module": str(module), "function": "f", "operator": "x", "mutated_line": "mutated line 4",
                  "line": 0, "occurrence": 0, "reason": "r"}
    from cosmic_ray.work_db import WorkDB, use_db
    with use_db(str(session), WorkDB.Mode.open) as db:
        fourth = sorted(db.completed_work_items, key=lambda ir: ir[1].diff)[4][0].mutations[0]
    equivalent.update(operator=fourth.operator_name, line=fourth.start_pos[0], occurrence=fourth.occurrence)
    score = score_session(target, Baseline(True, 10.0), session, [equivalent])
    counts = score.counts()
    assert (counts[Outcome.KILLED], counts[Outcome.TIMED_OUT], counts[Outcome.SURVIVED], counts[Outcome.ERROR],
            counts[Outcome.EQUIVALENT]) == (1, 1, 1, 1, 1)
    assert score.pending > 0  # the module's other mutants were never run: as when a --deadline comes
    report = render_report([score], sampled=None)
    row = f"| toy | 10 s of 100 | 5 of {5 + score.pending} (deadline) | 1 | 1 | 1 | 0 | 1 | 1 | 25.0% |"
    assert row in report   # killed / (killed + survived + timed out + errors)
    assert "## survived" in report and "## timed out" in report and "## error" in report
    kept = score_from_json(json.loads(json.dumps(score_to_json(score))), [target])  # as scripts/mutation/results/ keep it
    assert render_report([kept], sampled=None) == report  # killed mutants' diffs are not kept: never shown
    assert reclassify(kept, [equivalent]) == kept  # judged again against the same list: the same
    unlisted = reclassify(kept, []).counts()  # its equivalent taken off the list: a survivor again
    assert (unlisted[Outcome.SURVIVED], unlisted[Outcome.EQUIVALENT]) == (2, 0)
    elsewhere = reclassify(kept, [{**equivalent, "line": equivalent["line"] + 1}]).counts()  # another line: another mutant
    assert (elsewhere[Outcome.SURVIVED], elsewhere[Outcome.EQUIVALENT]) == (2, 0)
    slower = reclassify(kept, [{**equivalent, "kind": "time or cost"}]).counts()  # listed apart, not equivalent
    assert (slower[Outcome.TIME_OR_COST], slower[Outcome.EQUIVALENT], slower[Outcome.SURVIVED]) == (1, 0, 1)


def test_no_row_with_a_timeout_or_an_error_scores_100_percent_and_the_head_says_what_settles():
    """Every other mutant killed, one timed out: the score is not 100 % (a timeout is no kill), and
    the report's head counts the settled targets and names each unsettled one with why."""
    target, other = Target("toy", ("m.py",), ("t.py",), 100.0), Target("done", ("n.py",), ("u.py",), 100.0)
    killed = [Mutant("m.py", i, "f", "op", f"x{i}", "", Outcome.KILLED) for i in range(999)]
    hung = Mutant("m.py", 1000, "f", "op", "y", "diff", Outcome.TIMED_OUT, seconds=30.0, output="Timeout")
    scores = [TargetScore(target, Baseline(True, 10.0), [*killed, hung]),
              TargetScore(other, Baseline(True, 1.0), [Mutant("n.py", 1, "g", "op", "z", "", Outcome.KILLED)])]
    report = render_report(scores, sampled=None, wanted=["toy", "done", "absent"])
    assert "| 999 | 0 | 0 | 0 | 1 | 0 | 99.9% |" in report and "| 1 | 0 | 0 | 0 | 0 | 0 | 100.0% |" in report
    assert "**Settled 1 of 3** (`scripts/mutation.sh --render --strict` exits 1" in report
    assert "- toy: 1 timed out" in report and "- absent: no result" in report
    assert "Tests: 30.0 s." in report and "```text\nTimeout\n```" in report  # its time and first output lines


def test_progress_counts_the_mutants_run_of_those_to_run_by_outcome(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text("def f(a, b):\n    return a + b if a < b else a - b\n")
    session = _session(tmp_path, module, {0: ("normal", "killed", "1 failed"), 1: ("normal", "killed", "timeout"),
                                          2: ("normal", "survived", "ok"), 3: ("skipped", None, "filtered")})
    from cosmic_ray.work_db import WorkDB, use_db
    with use_db(str(session), WorkDB.Mode.open) as db:
        to_run = db.num_work_items - 1  # the skipped one is not to run
    assert session_progress("toy", session, 150.0) == (
        f"toy: 3 of {to_run} mutants run (1 killed, 1 timed out, 1 survived), 2 min")


def test_a_run_stopped_by_its_deadline_or_a_ctrl_c_ends_cosmic_ray_and_the_tests_it_started(tmp_path, capsys,
                                                                                            monkeypatch):
    """exec_until: progress lines while it runs; at should_stop() the whole process tree is ended
    (the test command runs in a session of its own) and False says the copy may hold a mutant."""
    import time

    import mutation
    import psutil

    monkeypatch.setattr(mutation, "PROGRESS_EVERY_S", 0.5)
    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(120)'], start_new_session=True); open({str(pid_file)!r}, 'w').write(str(p.pid)); "
              "time.sleep(120)")
    stop_at = time.monotonic() + 3
    assert mutation.exec_until([sys.executable, "-c", script], tmp_path, {}, lambda: time.monotonic() > stop_at,
                               lambda: "toy: still going") is False
    assert time.monotonic() - stop_at < 5
    assert "toy: still going" in capsys.readouterr().out
    grandchild = int(pid_file.read_text())

    def gone() -> bool:  # killed: no longer there, or a zombie its new parent has not reaped yet
        try:
            return psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    give_up = time.monotonic() + 5  # SIGKILL is delivered asynchronously
    while not gone() and time.monotonic() < give_up:
        time.sleep(0.05)
    assert gone()
    assert mutation.exec_until([sys.executable, "-c", "pass"], tmp_path, {}, lambda: False, str) is True


CTRL_C_DRIVER = """
import signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a background job inherits it ignored
sys.path.insert(0, "scripts")
import mutation

said = threading.Lock()  # print writes the text and its newline apart: two threads could interleave them

def say(line):
    with said:
        print(line, flush=True)

def worker(queue, done, args, finished):  # stands in for a worker scoring its targets
    say("started")
    while not mutation.should_stop(args):
        time.sleep(0.01)
    say("stopped")

mutation.work_through = worker
sys.exit(mutation.main(["--jobs", "2", "--results", sys.argv[1], "graph", "lease"]))
"""


def test_a_ctrl_c_stops_every_worker_as_a_deadline_does(tmp_path):
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_DRIVER, str(tmp_path)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert [proc.stdout.readline().strip() for _ in range(2)] == ["started", "started"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert out.count("stopped") == 2 and "interrupted: scoring the mutants run so far" in out


def test_a_target_settles_only_with_every_mutant_killed_or_listed_and_a_trusted_baseline():
    """What --strict (the nightly job) fails on."""
    target = Target("toy", ("m.py",), ("tests/none.py",), 100.0)

    def mutants(*outcomes: Outcome) -> list[Mutant]:
        return [Mutant("m.py", i, "f", "op", f"line {i}", "", o) for i, o in enumerate(outcomes)]

    settled = TargetScore(target, Baseline(True, 10.0), mutants(Outcome.KILLED, Outcome.EQUIVALENT))
    assert unsettled(settled) == []
    assert unsettled(TargetScore(target, Baseline(True, 10.0), mutants(Outcome.KILLED, Outcome.SURVIVED,
                                                                       Outcome.TIMED_OUT, Outcome.ERROR),
                                 pending=3)) == ["1 survived", "1 timed out", "1 error", "3 not run (deadline)"]
    assert unsettled(TargetScore(target, Baseline(True, 51.0), mutants(Outcome.KILLED))) == [
        "baseline took 51 s, over half the 100 s timeout"]


def test_strict_render_fails_on_an_unsettled_kept_result_and_the_nightly_job_asks_for_it(tmp_path, capsys):
    import mutation

    target = next(t for t in TARGETS if t.name == "retry")
    results = tmp_path / "results"
    results.mkdir()
    killed = [Mutant(target.modules[0], 1, "f", "op", "x", "", Outcome.KILLED)]
    score = TargetScore(target, Baseline(True, 10.0), killed,
                        module_sha256=module_shas(target, REPO), measured_on="2026-12-07")  # of today's code
    (results / "retry.json").write_text(json.dumps(score_to_json(score)))
    argv = ["--render", "--strict", "--report", str(tmp_path / "report.md"), "--results", str(results)]
    assert mutation.main([*argv, "retry"]) == 0
    assert mutation.main([*argv, "retry", "lease"]) == 1 and "lease: no result" in capsys.readouterr().err
    score.mutants.append(Mutant(target.modules[0], 2, "f", "op", "y", "diff", Outcome.SURVIVED))
    (results / "retry.json").write_text(json.dumps(score_to_json(score)))
    assert mutation.main([*argv, "retry"]) == 1 and "retry: 1 survived" in capsys.readouterr().err
    assert "| retry |" in (tmp_path / "report.md").read_text()
    nightly = (REPO / ".ci" / "nightly").read_text()
    assert "scripts/mutation.sh" in nightly and "--strict" in nightly and " deciding" in nightly


@pytest.mark.parametrize("baseline, why", [(Baseline(False, 3.0, "1 failed"), "baseline failed"),
                                           (Baseline(True, 61.0), "over half the 120 s timeout")])
def test_a_target_whose_baseline_is_untrustworthy_gets_no_score(baseline, why):
    target = Target("slow", ("m.py",), ("t.py",), 120.0)
    assert not baseline.trusted(target.timeout_s)
    from mutation_outcomes import TargetScore
    line = next(l for l in render_report([TargetScore(target, baseline)], sampled=8).splitlines() if "| slow |" in l)
    assert "refused" in line and why in line and "%" not in line


def test_an_equivalent_without_a_reason_is_refused(tmp_path):
    path = tmp_path / "eq.json"
    entry = {"module": "m.py", "function": "f", "operator": "o", "mutated_line": "x", "line": 3, "occurrence": 0,
             "reason": " "}
    path.write_text(json.dumps([entry]))
    with pytest.raises(ValueError, match="a reason"):
        load_equivalents(path)
    path.write_text(json.dumps([{k: v for k, v in entry.items() if k != "line"} | {"reason": "r"}]))
    with pytest.raises(ValueError, match="lacks \\['line'\\]"):  # matched on its line and occurrence
        load_equivalents(path)
    path.write_text(json.dumps([{**entry, "reason": "r", "kind": "faster"}]))
    with pytest.raises(ValueError, match="kind 'faster' is not one of"):
        load_equivalents(path)


def test_every_listed_equivalent_names_one_surviving_mutant_of_the_current_code():
    """Each entry of a target whose kept result is of today's code (or that has none) names exactly
    one mutant of today's code by line and occurrence (one that moved, or whose line now holds
    another mutant, must be re-examined, not kept); no two entries name the same mutant; and none
    names a mutant the kept results show killed (then it is no equivalent). An entry of a target whose
    code changed since its run is not matched against code it was not written about: the committed
    report must say that target is stale (its next run judges the entry)."""
    import mutation

    entries = load_equivalents(EQUIVALENTS)
    assert entries, "the committed list is read"
    kept = mutation.kept_results(RESULTS)
    stale = {name for name, score in kept.items() if score.stale}
    of_stale = [e for e in entries if target_of(e["module"]) in stale]
    current = [e for e in entries if target_of(e["module"]) not in stale]
    problems = stale_equivalents(current, REPO, kept_outcomes(skip=stale))
    problems += [f"duplicate: {e}" for i, e in enumerate(of_stale) if e in of_stale[:i]]
    report = REPORT.read_text()
    problems += [f"{name} is stale ({kept[name].stale}) but the committed report does not say so: "
                 "scripts/mutation.sh --render --report scripts/mutation/report.md"
                 for name in sorted({target_of(e["module"]) for e in of_stale})
                 if f"| {name} | stale: code changed since this run" not in report]
    assert not problems, "\n".join(problems)


def target_of(module: str) -> str:
    """The target that mutates `module` (a file of today's tree)."""
    [name] = [t.name for t in TARGETS if module in module_files(t, REPO)]
    return name


def test_entries_to_re_decide_keep_their_reason_and_say_what_changed():
    """Entries whose code changed since the run they were written about wait in to-re-decide.json,
    reason kept, with what changed and where they were; none of them is matched as an equivalent."""
    waiting = json.loads(TO_RE_DECIDE.read_text())
    assert waiting, "the list is read"
    for e in waiting:
        assert e["reason"].strip() and e["why_re_decide"].strip() and e["was"]["commit"], e
    listed = load_equivalents(EQUIVALENTS)
    assert not [e for e in waiting if {k: v for k, v in e.items() if k not in ("why_re_decide", "was")} in listed]


def kept_outcomes(skip: set[str] = frozenset()) -> dict[tuple, str]:
    """(module, line, operator, mutated line) -> outcome, from the kept results (but those of `skip`)."""
    found = {}
    for path in RESULTS.glob("*.json"):
        if path.stem in skip:
            continue
        for m in json.loads(path.read_text())["mutants"]:
            found[(m["module"], m["line"], m["operator"], m["mutated_line"])] = m["outcome"]
    return found


def stale_equivalents(entries: list[dict], root: Path, outcomes: dict[tuple, str]) -> list[str]:
    by_module: dict[str, list[dict]] = {}
    for e in entries:
        by_module.setdefault(e["module"], []).append(e)
    problems, named = [], {}
    for module, listed in by_module.items():
        mutants = list_mutants(root / module, {(e["function"], e["operator"]) for e in listed})
        for e in listed:
            key = (e["module"], e["function"], e["operator"], e["mutated_line"], e["line"], e["occurrence"])
            if key in named:
                problems.append(f"duplicate: {key}")
            named[key] = e
            hits = [m for m in mutants if (m.function, m.operator, m.mutated_line, m.line, m.occurrence) == key[1:]]
            if len(hits) != 1:
                problems.append(f"names no mutant of today's {module} (moved, or the line now holds another): {key}")
            kept = outcomes.get((e["module"], e["line"], e["operator"], e["mutated_line"]))
            if kept == Outcome.KILLED.value:
                problems.append(f"the kept results show it killed: {key}")
    return problems


def test_the_stale_entry_check_fails_on_a_moved_duplicated_or_killed_entry(tmp_path):
    """The check above on a toy module: an entry whose line moved (its text now matches only the
    mutant on another line), a duplicate, and an entry the results show killed are each named."""
    module = tmp_path / "m.py"
    module.write_text("def f(a):\n    return a + 1\n\n\ndef g(a):\n    return a + 1\n")
    [first] = [m for m in list_mutants(module) if m.function == "f" and m.operator == "core/NumberReplacer"][:1]
    entry = {"module": str(module), "function": "f", "operator": first.operator, "mutated_line": first.mutated_line,
             "line": first.line, "occurrence": first.occurrence, "reason": "r"}
    assert stale_equivalents([entry], Path("/"), {}) == []
    assert any("duplicate" in p for p in stale_equivalents([entry, entry], Path("/"), {}))
    killed = {(entry["module"], entry["line"], entry["operator"], entry["mutated_line"]): "killed"}
    assert any("killed" in p for p in stale_equivalents([entry], Path("/"), killed))
    module.write_text("import os\n\n\n" + module.read_text())  # the code moved: the entry names no mutant now
    assert any("names no mutant" in p for p in stale_equivalents([entry], Path("/"), {}))


def test_every_target_names_modules_and_tests_that_exist():
    for t in TARGETS:
        for path in (*t.modules, *t.tests):
            assert (REPO / path).exists(), f"target {t.name}: {path} does not exist"


def test_a_result_whose_modules_changed_since_its_run_is_stale_shows_no_score_and_strict_fails(tmp_path, capsys):
    """A kept result records the sha256 of each module its run mutated: one that differs from today's
    (here changed by hand), a module of the target the run did not mutate, or no sha256 at all makes
    it stale: its row shows no score, the head names it stale, and --strict exits 1 saying why."""
    import mutation

    target = next(t for t in TARGETS if t.name == "retry")
    results = tmp_path / "results"
    results.mkdir()
    shas = module_shas(target, REPO)
    argv = ["--render", "--strict", "--report", str(tmp_path / "report.md"), "--results", str(results), "retry"]

    def judged(module_sha256: dict[str, str]) -> tuple[int, str, str]:
        score = TargetScore(target, Baseline(True, 10.0), [Mutant(target.modules[0], 1, "f", "op", "x", "",
                                                                  Outcome.KILLED)],
                            module_sha256=module_sha256, measured_on="2026-12-01")
        (results / "retry.json").write_text(json.dumps(score_to_json(score)))
        rc = mutation.main(argv)
        return rc, capsys.readouterr().err, (tmp_path / "report.md").read_text()

    rc, err, report = judged(shas)
    assert rc == 0 and "| retry | 10 s of 120 | 1 | 1 |" in report and "Settled: retry." in report
    [module] = shas
    by_hand = {module: ("0" if shas[module][0] != "0" else "1") + shas[module][1:]}
    rc, err, report = judged(by_hand)
    why = f"retry: stale: code changed since this run (2026-12-01): {module} changed"
    assert rc == 1 and why in err
    [row] = [line for line in report.splitlines() if line.startswith("| retry |")]
    assert "stale: code changed since this run (2026-12-01)" in row and "%" not in row and "| 1 |" not in row
    assert "Settled: none." in report
    assert f"- retry: code changed since this run (2026-12-01): {module} changed" in report
    assert mutation.main(["--recheck", "--results", str(results), "retry"]) == 2  # its mutants are not today's
    assert f"retry: no --recheck: {module} changed: its mutants are not today's" in capsys.readouterr().err
    rc, err, _ = judged({**shas, "executor/engine/store/gone.py": "0" * 64})
    assert rc == 1 and "executor/engine/store/gone.py gone" in err
    rc, err, _ = judged({})
    assert rc == 1 and "the run recorded no sha256 of its modules" in err
