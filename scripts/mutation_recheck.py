"""Re-run a kept result's open mutants (survived, timed out, errors) against today's tests, or
run the mutants a kept result's deadline left unrun.

    scripts/mutation.sh --recheck --report scripts/mutation/report.md execute identity
    scripts/mutation.sh --continue --deadline 60 --report scripts/mutation/report.md execute

A full run of a large target takes hours, so tests written afterwards for its survivors would show
in the report only after the next one. A re-check runs each open mutant of the kept result again,
with all the target's tests and the target's timeout, in a fresh copy of the working tree, and
replaces its outcome; the run's kills and listed equivalents are kept as they are. It is refused
unless the target's modules are exactly those the run mutated (the clean commit its provenance names,
and no change to them since): only then are the kept mutants today's mutants. The report's line for
the target says when, on which commit, and what came of it. A timed-out mutant runs again without
`-x` and with a per-test hang limit: a hanging test that sorts first no longer hides a test that
fails on the mutant (then it is a kill, as graph.py:190 was).

`--continue` is the same idea for a run its deadline stopped: a fresh run of the target in which
every mutant the kept result holds is skipped ("run before", matched by module, line, operator and
mutated line), merged into the kept result; refused on the same terms.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from mutation_outcomes import Mutant, Outcome, TargetScore, added_line, classify, first_lines, mutant_diff

OPEN = (Outcome.SURVIVED, Outcome.TIMED_OUT, Outcome.ERROR)
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
_RUN_COMMIT = re.compile(r" on ([0-9a-f]{7,40})(-dirty)?, started ")


def run_commit(provenance: str) -> str | None:
    """The commit a kept run mutated, if its provenance names a clean one."""
    found = _RUN_COMMIT.search(provenance)
    return found.group(1) if found and not found.group(2) else None


def why_not_recheckable(score: TargetScore, root: Path) -> str | None:
    """None when the working tree's modules of the target are the ones its kept run mutated."""
    commit = run_commit(score.provenance)
    if commit is None:
        return "its run names no clean commit (a working tree with changes): run the target again"
    diff = subprocess.run(["git", "diff", "--name-only", commit, "--", *score.target.modules], cwd=root,
                          capture_output=True, text=True)
    if diff.returncode != 0:
        return f"git cannot compare with {commit}: {diff.stderr.strip()}"
    if diff.stdout.strip():
        changed = ", ".join(diff.stdout.split())
        return f"{changed} changed since its run on {commit}: its mutants are not today's; run the target again"
    return None


def past_hangs(command: list[str], hang_s: float) -> list[str]:
    """`command` (pytest ... tests) without `-x` and with a per-test limit (`--timeout`) if it had
    none: every test runs, a hanging one ended after `hang_s`."""
    rest = [c for c in command if c != "-x"]
    if any(c.startswith("--timeout=") for c in rest):
        return rest
    at = rest.index("pytest") + 1 if "pytest" in rest else len(rest)
    return [*rest[:at], f"--timeout={hang_s:g}", *rest[at:]]


def failed_apart_from_hangs(output: str) -> bool:
    """A test failed (or errored) other than by a hang limit: pytest's summary lines tell."""
    return any(line.startswith(("FAILED ", "ERROR ")) and "Timeout" not in line for line in output.splitlines())


def run_tests(command: list[str], work: Path, timeout_s: float, past_hang: bool = False) -> tuple[Outcome, float, str]:
    """The tests' verdict on the mutant in `work`, as cosmic-ray's would be classified, their time and
    the first lines of their output; with `past_hang` (run without -x), any failure but a hang kills."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # they and what they started are killed
        os.killpg(proc.pid, signal.SIGKILL)
        output = proc.communicate()[0] or ""
        return Outcome.TIMED_OUT, time.monotonic() - started, first_lines(output)
    took = time.monotonic() - started
    if past_hang and failed_apart_from_hangs(output):
        return Outcome.KILLED, took, first_lines(output)
    outcome = classify("normal", "survived" if proc.returncode == 0 else "killed", output)  # any failure kills
    return outcome, took, first_lines(output)


def apply_diff(source: str, diff: str) -> str | None:
    """`source` with a cosmic-ray diff applied, or None where it does not fit. cosmic-ray diffs
    `source.split("\n")` (a final empty line included, which `patch` refuses), so it is applied the
    same way, hunk by hunk."""
    hunks: list[tuple[int, list[str], list[str]]] = []
    for line in diff.split("\n"):
        header = _HUNK.match(line)
        if header:
            hunks.append((int(header.group(1)) - 1, [], []))
        elif hunks and line[:1] in (" ", "-", "+"):
            _, old, new = hunks[-1]
            for side in (old,) if line[0] == "-" else (new,) if line[0] == "+" else (old, new):
                side.append(line[1:])
    lines, result, cursor = source.split("\n"), [], 0
    for start, old, new in hunks:
        if start < cursor or lines[start:start + len(old)] != old:
            return None
        result += lines[cursor:start] + new
        cursor = start + len(old)
    return "\n".join(result + lines[cursor:]) if hunks else None


def run_mutant(mutant: Mutant, work: Path, command: list[str], timeout_s: float) -> tuple[Outcome, float | None, str]:
    """Apply the mutant's diff in `work`, run the tests, put the module back as it was."""
    module = work / mutant.module
    pristine = module.read_text()
    mutated = apply_diff(pristine, mutant.diff)
    if mutated is None:  # the module is no longer the one mutated: nothing to test
        return Outcome.ERROR, None, "the mutant's diff no longer applies to the module"
    past_hang = mutant.outcome is Outcome.TIMED_OUT
    if past_hang:  # all the tests, each ended at a quarter of the timeout, the whole run at twice it
        command, timeout_s = past_hangs(command, timeout_s / 4), timeout_s * 2
    try:
        module.write_text(mutated)
        return run_tests(command, work, timeout_s, past_hang)
    finally:
        module.write_text(pristine)


def recheck(score: TargetScore, work: Path, command: list[str], rev: str, say: Callable[[str], None],
            should_stop: Callable[[], bool] = lambda: False) -> TargetScore:
    """The kept score with its open mutants run again, survivors first (timeouts, the slowest, last);
    `say` gets a line per mutant. Once `should_stop()` (a deadline) the rest keep their outcome."""
    mutants = list(score.mutants)
    todo = sorted((i for i, m in enumerate(mutants) if m.outcome in OPEN), key=lambda i: OPEN.index(mutants[i].outcome))
    started, found = time.monotonic(), Counter()
    for n, i in enumerate(todo, 1):
        if should_stop():
            break
        m = mutants[i]
        outcome, seconds, output = run_mutant(m, work, command, score.target.timeout_s)
        mutants[i] = dataclasses.replace(m, outcome=outcome, seconds=seconds, output=output)
        found[mutants[i].outcome] += 1
        say(f"{score.target.name}: {n} of {len(todo)} re-run, {m.module}:{m.line} {m.operator}: "
            f"{mutants[i].outcome.value}")
    run, when = sum(found.values()), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    note = (f" Re-checked on {rev}, {when}, in {time.monotonic() - started:.0f} s: of its {len(todo)} survived, "
            f"timed out or error mutants, {run} run again with all the target's tests (a timed-out one "
            f"without -x, each test ended at a hang limit)"
            + (f" ({len(todo) - run} left as they were by the deadline)" if run < len(todo) else "") + ": "
            f"{found[Outcome.KILLED]} killed, {found[Outcome.SURVIVED]} survived, "
            f"{found[Outcome.TIMED_OUT]} timed out, {found[Outcome.ERROR]} errors.")
    return dataclasses.replace(score, mutants=mutants, provenance=score.provenance + note)


def skip_run_before(session: Path, kept: TargetScore, work: Path) -> int:
    """Mark as skipped each pending mutant of a fresh session that the kept result already ran;
    returns how many are left to run."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    done = {(m.module, m.line, m.operator, m.mutated_line) for m in kept.mutants if m.outcome is not Outcome.SKIPPED}
    sources: dict[str, str] = {}
    left = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            spec = item.mutations[0]
            module = str(spec.module_path)
            source = sources.setdefault(module, (work / module).read_text())
            mutated_line = added_line(mutant_diff(source, spec, Path(module)))
            if (module, spec.start_pos[0], spec.operator_name, mutated_line) in done:
                db.set_result(item.job_id, WorkResult(output="run before", worker_outcome=WorkerOutcome.SKIPPED))
            else:
                left += 1
    return left


def merge_continued(kept: TargetScore, more: TargetScore, note: str) -> TargetScore:
    """The kept result with the mutants a continued run added (its skipped ones are the kept
    result's own, or mutants the operator filter leaves out, which the kept result lists too)."""
    added = [m for m in more.mutants if m.outcome is not Outcome.SKIPPED]
    return dataclasses.replace(kept, mutants=kept.mutants + added, pending=more.pending,
                               seconds=kept.seconds + more.seconds,
                               provenance=f"{kept.provenance} Continued: {note}; its baseline "
                                          f"{more.baseline.seconds:.0f} s ({'passed' if more.baseline.passed else 'failed'}); "
                                          f"{len(added)} more mutants run.")
