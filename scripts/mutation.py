"""Mutation testing over the modules that decide things, with cosmic-ray; prints a score per target.

    scripts/mutation.sh                      # every target, every mutant (hours on 2 cores)
    scripts/mutation.sh --sample 25 lease    # 25 seeded random mutants of one target (minutes)
    scripts/mutation.sh --list               # the targets and the tests each is scored against

Each target is a set of modules and the tests that guard them. The work happens in a copy of the
tracked tree under a temporary directory with its own `uv sync`ed environment, because cosmic-ray
mutates files on disk in place (which is also what lets subprocess, Ray and CLI tests see the
mutant). A mutant is *killed* when its tests fail or time out, *survived* otherwise. Survivors are
printed with their diffs; each must be killed by a new test or listed as equivalent, with the
reason, in tests/README.md. Not part of CI: too slow.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Operators whose mutants are mostly noise here (bit operations, exotic arithmetic swaps).
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_.*_(Pow|RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)$",
    r"core/ReplaceBinaryOperator_(Pow|RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)_.*",
    r"core/ReplaceUnaryOperator_.*Invert.*",
]


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    timeout_s: float = 120.0


TARGETS = [
    Target("identity", ("executor/core/canonical.py", "executor/core/identity.py"),
           ("tests/executor/test_canonical.py", "tests/executor/test_identity.py",
            "tests/executor/test_canonical_reference.py", "tests/executor/test_encodings.py")),
    Target("plan", ("executor/core/plan.py",),
           ("tests/executor/test_plan.py", "tests/promises/test_promises.py")),
    Target("lease", ("executor/engine/lease.py",),
           ("tests/executor/test_lease.py", "tests/promises/test_promises.py")),
    Target("execute", ("executor/engine/execute.py",),
           ("tests/executor/test_run_inline.py", "tests/promises/test_promises.py",
            "tests/leases/test_record_fencing.py", "tests/executor/test_staleness.py",
            "tests/executor/test_waits_and_preparation.py"), 240.0),
    Target("record", ("executor/core/record.py",),
           ("tests/executor", "tests/leases/test_faults_corrupt.py")),
    Target("retry", ("executor/engine/store/retry.py",), ("tests/store/test_retry.py",)),
    Target("dedup", ("steps/dedup",), ("tests/steps/test_dedup_exact.py", "tests/steps/test_dedup_fuzzy.py",
                                        "tests/steps/test_dedup_bad_input.py"), 240.0),
    Target("tokenize", ("steps/tokenize.py", "steps/bpe.py"), ("tests/steps/test_tokenize.py",), 240.0),
    Target("train-state", ("steps/train/state.py",),
           ("tests/promises/test_router_bias.py", "tests/steps/test_train_optim.py")),
    Target("eval", ("steps/eval",), ("tests/steps/test_eval.py",), 240.0),
    Target("verify-gc", ("executor/tools/verify.py", "executor/tools/gc.py"),
           ("tests/tools/test_verify.py", "tests/tools/test_gc.py"), 240.0),
]


def config_text(target: Target, python: str) -> str:
    modules = ", ".join(f'"{m}"' for m in target.modules)
    excluded = ", ".join(f"'{e}'" for e in EXCLUDED_OPERATORS)
    tests = " ".join(target.tests)
    return f"""[cosmic-ray]
module-path = [{modules}]
timeout = {target.timeout_s}
excluded-modules = []
test-command = "{python} -m pytest -x -q -p no:cacheprovider -p no:randomly {tests}"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = [{excluded}]
"""


def sample(session: Path, keep: int, seed: int) -> None:
    """Keep `keep` seeded random pending mutants; mark the rest skipped (cosmic-ray's filter API)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkResult, WorkerOutcome

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


def score(session: Path) -> tuple[int, int, list[str]]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    killed = total = 0
    survivors = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            total += 1
            if result.test_outcome == TestOutcome.SURVIVED and result.worker_outcome == WorkerOutcome.NORMAL:
                m = item.mutations[0]
                survivors.append(f"{m.module_path}:{m.start_pos[0]} {m.operator_name}\n{result.diff or ''}")
            else:
                killed += 1
    return killed, total, survivors


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


def run_target(target: Target, work: Path, keep: int | None, seed: int) -> tuple[int, int, list[str]]:
    python = str(work / ".venv" / "bin" / "python")
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
    return score(session)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="target names (default: all)")
    parser.add_argument("--sample", type=int, default=None, help="mutants per target, seeded random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the working copy (its path is printed)")
    parser.add_argument("--rev", default=None, help="score a commit's code and tests instead of the working tree")
    args = parser.parse_args(argv)
    by_name = {t.name: t for t in TARGETS}
    if args.list:
        for t in TARGETS:
            print(f"{t.name:12} {' '.join(t.modules)}\n{'':12} tests: {' '.join(t.tests)}")
        return 0
    unknown = [n for n in args.targets if n not in by_name]
    if unknown:
        parser.error(f"unknown target(s) {unknown}; choose from {sorted(by_name)}")
    chosen = [by_name[n] for n in args.targets] or TARGETS
    work = Path(tempfile.mkdtemp(prefix="stepgraph-mutation-"))
    print(f"working copy: {work}", flush=True)
    copy_tree(work, args.rev)
    subprocess.run(["uv", "sync", "--quiet", "--frozen"], cwd=work, check=True, env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"))
    rows = []
    try:
        for target in chosen:
            killed, total, survivors = run_target(target, work, args.sample, args.seed)
            rows.append((target.name, killed, total))
            for s in survivors:
                print(f"SURVIVED [{target.name}] {s}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'target':12} {'killed':>7} {'mutants':>8} {'score':>7}")
    for name, killed, total in rows:
        print(f"{name:12} {killed:7d} {total:8d} {100 * killed / max(total, 1):6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
