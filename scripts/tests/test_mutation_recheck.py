"""scripts/mutation_recheck.py: a kept result's open mutants run again against today's tests, only
while the target's modules are the ones its run mutated; its kills and equivalents are left alone."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from mutation_outcomes import Baseline, Outcome, Target, TargetScore, list_mutants  # noqa: E402
from mutation_recheck import merge_continued, recheck, run_commit, skip_run_before, why_not_recheckable  # noqa: E402

CALC = "def double(x):\n    return 2 * x\n\n\ndef half(x):\n    return x / 2\n"
TESTS = textwrap.dedent('''\
    import calc


    def test_double_of_one():
        while calc.double(1) != 2:  # a mutant giving another value hangs here: a timeout, not a kill
            pass


    def test_double_of_three():  # written after the run, for its survivor
        assert calc.double(3) == 6
    ''')
PROVENANCE = "`scripts/mutation.sh toy` on {rev}, started 2026-12-05 17:41 UTC, 2 cores, load average 1.0."


def test_the_run_commit_is_read_from_the_provenance_only_when_clean():
    assert run_commit(PROVENANCE.format(rev="b886575")) == "b886575"
    assert run_commit(PROVENANCE.format(rev="d0c6bb9-dirty")) is None
    assert run_commit("") is None


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_recheck_is_refused_once_the_modules_changed_since_the_run(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TESTS)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "run")
    commit = git(tmp_path, "rev-parse", "--short", "HEAD")
    score = TargetScore(Target("toy", ("calc.py",), ("test_calc.py",)), Baseline(True, 1.0),
                        provenance=PROVENANCE.format(rev=commit))
    (tmp_path / "test_calc.py").write_text(TESTS + "\n# a test changed: fine\n")
    assert why_not_recheckable(score, tmp_path) is None
    (tmp_path / "calc.py").write_text(CALC.replace("2 * x", "x + x"))
    assert f"calc.py changed since its run on {commit}" in why_not_recheckable(score, tmp_path)
    dirty = dataclasses.replace(score, provenance=PROVENANCE.format(rev=f"{commit}-dirty"))
    assert "no clean commit" in why_not_recheckable(dirty, tmp_path)


@pytest.mark.parametrize("hang_limit, timeout_s", [([], 20.0), (["--timeout=1"], 60.0)],  # 20 s: a loaded machine
                         ids=["past-the-timeout", "past-the-hang-limit"])
def test_open_mutants_are_run_again_and_the_kills_and_equivalents_are_left(tmp_path, monkeypatch, hang_limit,
                                                                           timeout_s):
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TESTS)
    monkeypatch.chdir(tmp_path)  # cosmic-ray names the module in its diff as given: relative
    made = {(m.function, m.operator): m for m in list_mutants(Path("calc.py"))}

    def kept(function: str, operator: str, outcome: Outcome):
        return dataclasses.replace(made[(function, operator)], outcome=outcome)

    mutants = [kept("double", "core/ReplaceBinaryOperator_Mul_Pow", Outcome.SURVIVED),  # 2 ** 3 != 6 now
               kept("half", "core/ReplaceBinaryOperator_Div_Mul", Outcome.SURVIVED),   # still untested
               kept("double", "core/ReplaceBinaryOperator_Mul_Add", Outcome.TIMED_OUT),  # 2 + x: hangs, and 5 != 6
               kept("double", "core/ReplaceBinaryOperator_Mul_Sub", Outcome.KILLED),    # would hang if re-run
               kept("double", "core/ReplaceBinaryOperator_Mul_Div", Outcome.EQUIVALENT)]
    score = TargetScore(Target("toy", ("calc.py",), ("test_calc.py",), timeout_s), Baseline(True, 0.5),
                        mutants=mutants, provenance=PROVENANCE.format(rev="b886575"))
    said: list[str] = []
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *hang_limit, "test_calc.py"]
    after = recheck(score, tmp_path, command, "c0ffee1", said.append)
    # the timed-out mutant runs without -x, its hanging test ended at the hang limit: the test after
    # it fails on the mutant, so it is a kill (as graph.py:190, scored a timeout under -x, was)
    assert [m.outcome for m in after.mutants] == [Outcome.KILLED, Outcome.SURVIVED, Outcome.KILLED,
                                                  Outcome.KILLED, Outcome.EQUIVALENT]
    assert len(said) == 3 and said[0].startswith("toy: 1 of 3 re-run, calc.py:2 ") and said[0].endswith("killed")
    assert said[2].endswith("killed") and "ReplaceBinaryOperator_Mul_Add" in said[2]  # survivors first, a timeout last
    assert after.provenance.startswith(score.provenance + " Re-checked on c0ffee1, ")
    assert after.provenance.endswith("of its 3 survived, timed out or error mutants, 3 run again with all the "
                                     "target's tests (a timed-out one without -x, each test ended at a hang "
                                     "limit): 2 killed, 1 survived, 0 timed out, 0 errors.")
    assert (tmp_path / "calc.py").read_text() == CALC  # each mutant taken back out
    assert all(m.seconds is not None and m.seconds > 0 and m.output for m in after.mutants[:3])  # time, first lines


def test_a_mutant_whose_diff_no_longer_applies_is_an_error_and_the_module_is_left_as_it_was(tmp_path,
                                                                                           monkeypatch):
    (tmp_path / "calc.py").write_text(CALC)
    monkeypatch.chdir(tmp_path)
    [mutant] = [m for m in list_mutants(Path("calc.py")) if m.operator == "core/ReplaceBinaryOperator_Div_Mul"]
    (tmp_path / "calc.py").write_text(CALC.replace("x / 2", "x / 2.0"))
    score = TargetScore(Target("toy", ("calc.py",), ("test_calc.py",)), Baseline(True, 0.5),
                        mutants=[dataclasses.replace(mutant, outcome=Outcome.SURVIVED)])
    after = recheck(score, tmp_path, [sys.executable, "-c", "pass"], "c0ffee1", lambda line: None)
    assert after.mutants[0].outcome is Outcome.ERROR
    assert (tmp_path / "calc.py").read_text() == CALC.replace("x / 2", "x / 2.0")


def test_a_continued_run_skips_what_the_kept_result_ran_and_adds_the_rest_to_it(tmp_path, monkeypatch):
    import mutation
    from cosmic_ray.work_db import WorkDB, use_db

    (tmp_path / "calc.py").write_text(CALC)
    monkeypatch.chdir(tmp_path)
    target = Target("toy", ("calc.py",), ("test_calc.py",))
    made = list_mutants(Path("calc.py"))
    ran = [dataclasses.replace(m, outcome=Outcome.KILLED, diff="") for m in made[:3]]  # what the deadline allowed
    kept = TargetScore(target, Baseline(True, 0.5), mutants=ran, seconds=10.0, pending=len(made) - 3,
                       provenance=PROVENANCE.format(rev="b886575"))
    (tmp_path / "toy.toml").write_text(mutation.config_text(target, sys.executable))
    subprocess.run([sys.executable, "-m", "cosmic_ray.cli", "init", "toy.toml", "toy.sqlite", "--force"],
                   check=True, capture_output=True)
    assert skip_run_before(tmp_path / "toy.sqlite", kept, tmp_path) == len(made) - 3
    with use_db(str(tmp_path / "toy.sqlite"), WorkDB.Mode.open) as db:
        assert sum(1 for _, r in db.completed_work_items if r.output == "run before") == 3
        assert sum(1 for _ in db.pending_work_items) == len(made) - 3
    more = TargetScore(target, Baseline(True, 0.4), seconds=5.0, pending=1,
                       mutants=[dataclasses.replace(m, outcome=Outcome.SURVIVED) for m in made[3:-1]]
                       + [dataclasses.replace(made[0], outcome=Outcome.SKIPPED)])
    merged = merge_continued(kept, more, "`scripts/mutation.sh --continue toy` on c0ffee1")
    assert [m.outcome for m in merged.mutants] == [Outcome.KILLED] * 3 + [Outcome.SURVIVED] * (len(made) - 4)
    assert (merged.pending, merged.seconds) == (1, 15.0)
    assert merged.provenance == (kept.provenance + " Continued: `scripts/mutation.sh --continue toy` on c0ffee1; "
                                 f"its baseline 0 s (passed); {len(made) - 4} more mutants run.")  # every run's


def test_continue_and_recheck_are_refused_without_a_kept_result_to_reuse(tmp_path, capsys):
    import json as json_module

    import mutation
    from mutation_outcomes import score_to_json

    whole = TargetScore(Target("graph", ("executor/core/graph.py",), ()), Baseline(True, 1.0), pending=0,
                        provenance=PROVENANCE.format(rev="b886575"))
    (tmp_path / "graph.json").write_text(json_module.dumps(score_to_json(whole)))
    args = mutation.parse_args(["--continue", "--results", str(tmp_path), "graph"])
    assert mutation.reusable_kept(args, "continue", need_unrun=True) is None
    assert "graph: no --continue: its kept run left no mutant unrun" in capsys.readouterr().err
    args = mutation.parse_args(["--continue", "--results", str(tmp_path)])
    assert mutation.reusable_kept(args, "continue", need_unrun=True) is None
    assert "--continue needs the targets, by name" in capsys.readouterr().err
    assert mutation.main(["--recheck", "--results", str(tmp_path), "retry"]) == 2
    assert "retry: no --recheck: no kept result" in capsys.readouterr().err


def test_a_recheck_stopped_by_its_deadline_keeps_the_rest_as_they_were_and_says_so(tmp_path, monkeypatch):
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TESTS)
    monkeypatch.chdir(tmp_path)
    made = {(m.function, m.operator): m for m in list_mutants(Path("calc.py"))}
    hang = dataclasses.replace(made[("double", "core/ReplaceBinaryOperator_Mul_Add")], outcome=Outcome.TIMED_OUT)
    caught = dataclasses.replace(made[("double", "core/ReplaceBinaryOperator_Mul_Pow")], outcome=Outcome.SURVIVED)
    score = TargetScore(Target("toy", ("calc.py",), ("test_calc.py",), 60.0), Baseline(True, 0.5),
                        mutants=[hang, caught], provenance=PROVENANCE.format(rev="b886575"))  # the hang is not run
    runs: list[str] = []
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "test_calc.py"]
    after = recheck(score, tmp_path, command, "c0ffee1", runs.append, should_stop=lambda: len(runs) == 1)
    assert [m.outcome for m in after.mutants] == [Outcome.TIMED_OUT, Outcome.KILLED]  # the survivor ran first
    assert "of its 2 survived, timed out or error mutants, 1 run again with all the target's tests (a timed-out " \
           "one without -x, each test ended at a hang limit) (1 left as they were by the deadline): 1 killed, " \
           "0 survived, 0 timed out, 0 errors." in after.provenance
