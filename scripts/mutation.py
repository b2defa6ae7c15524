"""Mutation testing over the modules that decide things, with cosmic-ray; writes a report per target.

    scripts/mutation.sh                          # every target, every mutant (the full run)
    scripts/mutation.sh --sample 25 lease        # 25 seeded random mutants of one target (minutes)
    scripts/mutation.sh --report tests/mutation/report.md   # the full run, and the committed report
    scripts/mutation.sh --list                   # the targets and the tests each is scored against
    scripts/mutation.sh --show executor/engine/lease.py   # every mutant of a module, as equivalents list them

Each target is a set of modules and the tests that guard them. The work happens in a copy of the
tracked tree under a temporary directory with its own `uv sync`ed environment, because cosmic-ray
mutates files on disk in place (which is also what lets subprocess, Ray and CLI tests see the
mutant).

A score can be trusted only if it counts what the tests found:
- each target's tests first run unmutated; a target whose baseline fails, or takes more than half
  its timeout, is refused (no score): a mutant would be "killed" by the clock or by a broken test;
- a mutant is *killed* when its tests fail, *timed out* when they ran past the timeout (cosmic-ray
  counts that as a kill; we do not), an *error* when the worker crashed or could not run the tests,
  *survived* when they passed, and *equivalent* when it survived and is listed, with its reason, in
  tests/mutation/equivalent.json (matched by module, function, operator and the mutated line).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_outcomes import (EXCLUDED_OPERATORS, TARGETS, Baseline, Target, TargetScore,  # noqa: E402
                               list_mutants, load_equivalents, render_report, score_session)

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "tests" / "mutation" / "equivalent.json"


def test_command(target: Target, python: str) -> str:
    return f"{python} -m pytest -x -q -p no:cacheprovider -p no:randomly {' '.join(target.tests)}"


def config_text(target: Target, python: str) -> str:
    modules = ", ".join(f'"{m}"' for m in target.modules)
    excluded = ", ".join(f"'{e}'" for e in EXCLUDED_OPERATORS)
    return f"""[cosmic-ray]
module-path = [{modules}]
timeout = {target.timeout_s}
excluded-modules = []
test-command = "{test_command(target, python)}"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = [{excluded}]
"""


def run_baseline(target: Target, work: Path, python: str) -> Baseline:
    """The target's tests on the unmutated copy: passed, and how long they took."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    try:
        proc = subprocess.run(test_command(target, python).split(), cwd=work, env=env, capture_output=True,
                              text=True, timeout=target.timeout_s)
    except subprocess.TimeoutExpired:
        return Baseline(passed=False, seconds=time.monotonic() - start, tail="timed out")
    return Baseline(passed=proc.returncode == 0, seconds=time.monotonic() - start,
                    tail=(proc.stdout + proc.stderr)[-2000:])


def sample(session: Path, keep: int, seed: int) -> None:
    """Keep `keep` seeded random pending mutants; mark the rest skipped (cosmic-ray's filter API)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        # job ids are random: sample by what the mutant *is*, so two runs (say, before and after a
        # change to the tests) draw the same mutants of the same code
        items = sorted(db.pending_work_items, key=lambda i: [(str(m.module_path), m.operator_name, m.occurrence)
                                                             for m in i.mutations])
        pending = [item.job_id for item in items]
        chosen = set(random.Random(seed).sample(pending, min(keep, len(pending))))
        for job_id in pending:
            if job_id not in chosen:
                db.set_result(job_id, WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED))


def run_target(target: Target, work: Path, keep: int | None, seed: int) -> TargetScore:
    python = str(work / ".venv" / "bin" / "python")
    baseline = run_baseline(target, work, python)
    if not baseline.trusted(target.timeout_s):
        return TargetScore(target=target, baseline=baseline)
    config, session = work / f"mutation-{target.name}.toml", work / f"mutation-{target.name}.sqlite"
    config.write_text(config_text(target, python))
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
    cr = [sys.executable, "-m", "cosmic_ray.cli"]  # cosmic-ray runs here; the tests in the copy's own env
    subprocess.run([*cr, "init", str(config), str(session), "--force"], cwd=work, check=True, env=env)
    subprocess.run([str(Path(sys.executable).parent / "cr-filter-operators"), str(session), str(config)],
                   cwd=work, check=True, env=env)
    if keep is not None:
        sample(session, keep, seed)
    subprocess.run([*cr, "exec", str(config), str(session)], cwd=work, check=True, env=env)
    return score_session(target, baseline, session, load_equivalents(EQUIVALENTS))


def copy_tree(dest: Path, rev: str | None) -> None:
    """The working tree's files (tracked and untracked-not-ignored), or a commit's with `rev`."""
    if rev is not None:
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="target names (default: all)")
    parser.add_argument("--sample", type=int, default=None, help="mutants per target, seeded random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the working copy (its path is printed)")
    parser.add_argument("--rev", default=None, help="score a commit's code and tests instead of the working tree")
    parser.add_argument("--report", type=Path, default=None, help="write the Markdown report here")
    parser.add_argument("--show", type=Path, default=None, metavar="MODULE",
                        help="list a module's mutants (JSON lines: the keys tests/mutation/equivalent.json uses)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.targets if n not in {t.name for t in TARGETS}]
    if unknown:
        parser.error(f"unknown target(s) {unknown}; choose from {sorted(t.name for t in TARGETS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.show is not None:
        for m in list_mutants(args.show):
            print(json.dumps({"module": m.module, "function": m.function, "operator": m.operator,
                              "mutated_line": m.mutated_line, "line": m.line}, ensure_ascii=False))
        return 0
    if args.list:
        for t in TARGETS:
            print(f"{t.name:12} {' '.join(t.modules)}\n{'':12} tests: {' '.join(t.tests)} (timeout {t.timeout_s:.0f} s)")
        return 0
    chosen = [t for t in TARGETS if t.name in args.targets] or TARGETS
    work = Path(tempfile.mkdtemp(prefix="stepgraph-mutation-"))
    print(f"working copy: {work}", flush=True)
    copy_tree(work, args.rev)
    subprocess.run(["uv", "sync", "--quiet", "--frozen"], cwd=work, check=True,
                   env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"))
    scores = []
    try:
        for target in chosen:
            scores.append(run_target(target, work, args.sample, args.seed))
            print(render_report(scores[-1:], sampled=args.sample), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = render_report(scores, sampled=args.sample)
    print(report)
    if args.report is not None:
        args.report.write_text(report)
    return 0 if all(s.baseline.trusted(s.target.timeout_s) for s in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
