"""Mutation testing over the modules that decide things, with cosmic-ray; writes a report per target.

    scripts/mutation.sh                          # every target, every mutant (the full run)
    scripts/mutation.sh --sample 25 lease        # 25 seeded random mutants of one target (minutes)
    scripts/mutation.sh --report scripts/mutation/report.md deciding   # the committed report
    scripts/mutation.sh --list                   # the targets and the tests each is scored against
    scripts/mutation.sh --show executor/engine/run/lease.py   # every mutant of a module, as equivalents list them
    scripts/mutation.sh --recheck --report scripts/mutation/report.md execute   # its open mutants, today's tests
    scripts/mutation.sh --continue --report scripts/mutation/report.md execute  # what its deadline left unrun

A full run of a large target takes hours: `--recheck` runs only a kept result's survivors, timeouts
and errors again against today's tests, while the target's modules are still the ones that run
mutated (scripts/mutation_recheck.py); the report says so on the target's line. `--continue` runs,
on the same terms, only the mutants a kept run's deadline left unrun, and adds them to its result.

While cosmic-ray runs, a line a minute says how many mutants have run and how they ended; Ctrl-C
stops the run as --deadline does (what ran is scored and kept; a second Ctrl-C leaves at once).

Each target is a set of modules and the tests that guard them. A full run stays affordable by
running, per mutant, first only the tests that execute the mutated line (recorded once per target by
a coverage run with test contexts), and all the target's tests only when those pass: the outcome is
the full run's, at the cost of the covering tests for most mutants (scripts/mutation_select.py). The work happens in a copy of the
tracked tree under a temporary directory with its own `uv sync`ed environment, because cosmic-ray
mutates files on disk in place (which is also what lets subprocess, Ray and CLI tests see the
mutant).

A score can be trusted only if it counts what the tests found:
- each target's tests first run unmutated; a target whose baseline fails, or takes more than half
  its timeout, is refused (no score): a mutant would be "killed" by the clock or by a broken test;
- a mutant is *killed* when its tests fail, *timed out* when they ran past the timeout (cosmic-ray
  counts that as a kill; we do not) or one test ran past the target's hang limit (pytest-timeout
  ended it: a hang found in seconds, still not a kill), an *error* when the worker crashed or could not run the tests,
  *survived* when they passed, and *equivalent* when it survived and is listed, with its reason, in
  scripts/mutation/equivalent.json (matched by module, function, operator, the mutated line, its line
  number and cosmic-ray's occurrence), or *time or cost* when its entry says `"kind": "time or cost"`
  (it differs only in how long or how much: not equivalent, shown apart);
- a kept result records the sha256 of each module its run mutated: once one differs from today's (or
  the target gained a module), the result is stale, shows no score and does not settle.
"""

from __future__ import annotations

import argparse
import contextlib
import concurrent.futures
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_recheck import merge_continued, recheck, skip_run_before, why_not_recheckable  # noqa: E402
from mutation_outcomes import (EXCLUDED_OPERATORS, TARGETS, Baseline, Target, TargetScore,  # noqa: E402
                               list_mutants, load_equivalents, module_files, module_shas, reclassify,
                               render_report, score_from_json, score_session, score_to_json, session_progress,
                               stale_since, today, unsettled)

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "scripts" / "mutation" / "equivalent.json"
# The modules that decide things, smallest runs first (`deciding` on the command line).
DECIDING = ["graph", "lease", "record", "plan", "stores", "execute", "regions", "retry", "verify-gc", "identity",
            "location"]
PROGRESS_EVERY_S = 60.0  # a line of how far cosmic-ray has got, while it runs
SELECT_DIR = ".mutation"  # in the working copy: pristine modules, coverage, each target's selection config


def pytest_command(target: Target, python: str) -> list[str]:
    """pytest as every run of a target's tests calls it (baseline, coverage, each mutant's covering
    tests and all its tests, a recheck): first failure ends it, no cache, no random order, in one
    process (`-n 0`: no xdist workers to start per mutant, coverage contexts as before), the hang limit."""
    return [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
            *target.pytest_args()]


def test_command(target: Target, python: str) -> list[str]:
    return [*pytest_command(target, python), *target.tests]


def select_command(target: Target, python: str) -> str:
    """What cosmic-ray runs per mutant: the covering tests first, then all (scripts/mutation_select.py)."""
    return f"{python} scripts/mutation_select.py {SELECT_DIR}/{target.name}.json"


def config_text(target: Target, python: str) -> str:
    modules = ", ".join(f'"{m}"' for m in target.modules)
    excluded = ", ".join(f"'{e}'" for e in EXCLUDED_OPERATORS)
    return f"""[cosmic-ray]
module-path = [{modules}]
timeout = {target.timeout_s}
excluded-modules = []
test-command = "{select_command(target, python)}"

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
        proc = subprocess.run(test_command(target, python), cwd=work, env=env, capture_output=True,
                              text=True, timeout=target.timeout_s)
    except subprocess.TimeoutExpired:
        return Baseline(passed=False, seconds=time.monotonic() - start, tail="timed out")
    return Baseline(passed=proc.returncode == 0, seconds=time.monotonic() - start,
                    tail=(proc.stdout + proc.stderr)[-2000:])


def record_coverage(target: Target, work: Path, python: str, files: list[str]) -> dict[str, dict[str, list[str]]]:
    """Which tests execute which lines of the target's modules, on the unmutated code: module ->
    line -> pytest node ids ("" for import time). Empty if the coverage run fails (then every
    mutant runs all the target's tests)."""
    select = work / SELECT_DIR
    rc, data_file = select / f"{target.name}.coveragerc", select / f"{target.name}.coverage"
    rc.write_text("[run]\nrelative_files = True\ninclude =\n" + "".join(f"    {f}\n" for f in files))
    command = [*test_command(target, python), "--cov", f"--cov-config={rc}", "--cov-context=test",
               "--cov-report="]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", COVERAGE_FILE=str(data_file))
    try:
        proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                              timeout=3 * target.timeout_s)
    except subprocess.TimeoutExpired:
        return {}
    if proc.returncode != 0:
        return {}
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    covered: dict[str, dict[str, list[str]]] = {}
    for measured in data.measured_files():
        by_line = data.contexts_by_lineno(measured)
        covered[measured] = {str(line): sorted({c.rsplit("|", 1)[0] for c in contexts})
                             for line, contexts in by_line.items()}
    return covered


def prepare_selection(target: Target, work: Path, python: str) -> int:
    """Pristine copies of the modules, their coverage, and scripts/mutation_select.py's config;
    returns how many lines some test covers."""
    files = module_files(target, work)
    pristine = work / SELECT_DIR / "pristine" / target.name
    for f in files:
        (pristine / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / f, pristine / f)
    covered = record_coverage(target, work, python, files)
    config = {"pytest": pytest_command(target, python), "modules": files, "tests": list(target.tests),
              "pristine": str(pristine), "covered": covered}
    (work / SELECT_DIR / f"{target.name}.json").write_text(json.dumps(config))
    return sum(len(lines) for lines in covered.values())


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


def exec_until(command: list[str], work: Path, env: dict, should_stop: Callable[[], bool],
               progress: Callable[[], str]) -> bool:
    """cosmic-ray exec, printing `progress()` every PROGRESS_EVERY_S; False if `should_stop()` (the
    deadline, or a Ctrl-C) came first, when it and the test run it started are ended (the copy may
    then hold a mutant: it must not be used again). What ran so far is still scored."""
    proc = subprocess.Popen(command, cwd=work, env=env, start_new_session=True)  # Ctrl-C is the main thread's
    last_progress = time.monotonic()
    try:
        while True:
            try:
                proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if should_stop():
                    return False
                if time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                    print(progress_line(progress), flush=True)
                    last_progress = time.monotonic()
    finally:
        if proc.returncode is None:  # still running (never a pid the system may have given another)
            end_tree(proc)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return True


def progress_line(progress: Callable[[], str]) -> str:
    try:
        return progress()
    except Exception as e:  # noqa: BLE001 - the session busy a moment, say: never a reason to end the run
        return f"(no progress line this time: {type(e).__name__}: {e})"


def end_tree(proc: subprocess.Popen) -> None:
    """Kill cosmic-ray and the test run it started (in a session of its own: ending cosmic-ray alone
    would leave it)."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait()


def run_target(target: Target, work: Path, keep: int | None, seed: int,
               should_stop: Callable[[], bool] = lambda: False,
               kept: TargetScore | None = None) -> tuple[TargetScore, bool]:
    """The target's score (only the mutants `kept` has not run, with --continue), and whether its
    working copy is still clean (no deadline came mid-run)."""
    python = str(work / ".venv" / "bin" / "python")
    shas, measured_on = module_shas(target, work), today()  # before any mutant touches the copy
    baseline = run_baseline(target, work, python)
    if not baseline.trusted(target.timeout_s):
        return TargetScore(target=target, baseline=baseline, module_sha256=shas, measured_on=measured_on), True
    start = time.monotonic()
    (work / SELECT_DIR).mkdir(exist_ok=True)
    covered_lines = prepare_selection(target, work, python)
    coverage_s = time.monotonic() - start
    config, session = work / f"mutation-{target.name}.toml", work / f"mutation-{target.name}.sqlite"
    config.write_text(config_text(target, python))
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
    cr = [sys.executable, "-m", "cosmic_ray.cli"]  # cosmic-ray runs here; the tests in the copy's own env
    subprocess.run([*cr, "init", str(config), str(session), "--force"], cwd=work, check=True, env=env)
    subprocess.run([str(Path(sys.executable).parent / "cr-filter-operators"), str(session), str(config)],
                   cwd=work, check=True, env=env)
    if keep is not None:
        sample(session, keep, seed)
    if kept is not None:
        print(f"{target.name}: {skip_run_before(session, kept, work)} mutants left to run", flush=True)
    started = time.monotonic()
    clean = exec_until([*cr, "exec", str(config), str(session)], work, env, should_stop,
                       lambda: session_progress(target.name, session, time.monotonic() - started))
    score = score_session(target, baseline, session, load_equivalents(EQUIVALENTS))
    score.seconds, score.coverage_seconds, score.covered_lines = time.monotonic() - start, coverage_s, covered_lines
    score.module_sha256, score.measured_on = shas, measured_on
    return score, clean


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


def make_working_copy(rev: str | None) -> Path:
    """A temporary copy of the tree (or of `rev`) with its own environment."""
    work = Path(tempfile.mkdtemp(prefix="stepgraph-mutation-"))
    print(f"working copy: {work}", flush=True)
    copy_tree(work, rev)
    subprocess.run(["uv", "sync", "--quiet", "--frozen"], cwd=work, check=True,
                   env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"))
    return work


def recheck_kept(args: argparse.Namespace) -> int:
    """--recheck: the named targets' open mutants run again against today's tests (mutation_recheck.py)."""
    kept = reusable_kept(args, "recheck", need_unrun=False)
    if kept is None:
        return 2
    where = f"{tree_rev()} (load average {os.getloadavg()[0]:.1f} at the start)"
    work = make_working_copy(None)
    try:
        python = str(work / ".venv" / "bin" / "python")
        for name in args.targets:
            score = recheck(kept[name], work, test_command(kept[name].target, python), where,
                            lambda line: print(line, flush=True), lambda: should_stop(args))
            (args.results / f"{name}.json").write_text(json.dumps(score_to_json(score), indent=1))
            print(render_report([score], sampled=None), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.report is not None:
        args.report.write_text(report_from_results(args.results, None, {}))
    return 0


def reusable_kept(args: argparse.Namespace, option: str, need_unrun: bool) -> dict[str, TargetScore] | None:
    """--recheck and --continue: the named targets' kept results, each measured on the modules the
    working tree has now (and, to continue, stopped by its deadline); None, having said why, if any
    is not."""
    if not args.targets:
        print(f"--{option} needs the targets, by name", file=sys.stderr)
        return None
    kept = kept_results(args.results)
    refusals = {}
    for name in args.targets:
        score = kept.get(name)
        refusals[name] = ("no kept result" if score is None else "its kept run left no mutant unrun"
                          if need_unrun and not score.pending else changed_since(score))
    for name, why in refusals.items():
        if why:
            print(f"{name}: no --{option}: {why}", file=sys.stderr)
    return None if any(refusals.values()) else {name: kept[name] for name in args.targets}


def changed_since(score: TargetScore) -> str | None:
    """Why a kept result's mutants are not today's, or None: by the sha256 its run recorded (a module
    moved but unchanged is still the one it mutated), else by git against the commit it names."""
    if score.module_sha256:
        return f"{score.stale}: its mutants are not today's; run the target again" if score.stale else None
    return why_not_recheckable(score, ROOT)


def should_stop(args: argparse.Namespace) -> bool:
    """The run's deadline has come, or a Ctrl-C asked to stop."""
    return args.stop.is_set() or (args.deadline_at is not None and time.monotonic() >= args.deadline_at)


def work_through(queue: list[Target], lock: threading.Lock, args: argparse.Namespace, finished) -> None:
    """One worker: its own working copy (a mutant is a file changed in place, so two targets never
    share one), taking targets from the queue in order."""
    work = make_working_copy(args.rev)
    try:
        while True:
            with lock:
                if not queue or should_stop(args):
                    return
                target = queue.pop(0)
            score, clean = run_target(target, work, args.sample, args.seed, lambda: should_stop(args),
                                      args.kept.get(target.name))
            finished(score)
            if not clean:
                return
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def kept_results(results: Path, root: Path = ROOT) -> dict[str, TargetScore]:
    """Each target's kept result, judged against today's list of equivalents, and marked stale where
    the target's modules under `root` are not the ones it mutated."""
    equivalents = load_equivalents(EQUIVALENTS)
    kept = {}
    for p in sorted(results.glob("*.json")):
        score = reclassify(score_from_json(json.loads(p.read_text()), TARGETS), equivalents)
        score.stale = stale_since(score, root)
        kept[p.stem] = score
    return kept


def report_strictly(scores: dict[str, TargetScore], wanted: list[str]) -> int:
    """--strict: 1, naming what is open, unless every wanted target has a settled result."""
    problems = {name: unsettled(scores[name]) if name in scores else ["no result"] for name in wanted}
    for name, found in problems.items():
        if found:
            print(f"{name}: {', '.join(found)}", file=sys.stderr)
    return 1 if any(problems.values()) else 0


def report_from_results(results: Path, sampled: int | None, scores: dict[str, TargetScore], head: str = "") -> str:
    """The report over every kept target result (so runs of some targets update the report), or over
    this run's scores for a sample; its head says how many deciding targets settle, and `head`."""
    if sampled is None:
        kept = kept_results(results)
        order = DECIDING + [t.name for t in TARGETS if t.name not in DECIDING]
        return render_report([kept[n] for n in order if n in kept], sampled=None, wanted=DECIDING, head=head)
    return render_report(list(scores.values()), sampled=sampled)


def tree_rev() -> str:
    return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()


def report_header(argv: list[str], note: str | None) -> str:
    """Where and when the figures were measured: they are times on a shared machine."""
    rev = tree_rev()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    line = (f"`scripts/mutation.sh {shlex.join(argv)}` on {rev}, started "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
            f"load average {load} at the start.")
    return line + (f" Note: {note}" if note else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*",
                        help=f"target names, or `deciding` for {' '.join(DECIDING)} (default: all)")
    parser.add_argument("--sample", type=int, default=None, help="mutants per target, seeded random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the working copy (its path is printed)")
    parser.add_argument("--rev", default=None, help="score a commit's code and tests instead of the working tree")
    parser.add_argument("--report", type=Path, default=None,
                        help="write the Markdown report here (rewritten after each target)")
    parser.add_argument("--deadline", type=float, default=None, metavar="MINUTES",
                        help="stop after this long (or at a Ctrl-C): the running targets are scored as far "
                             "as they got (marked in the report), targets not started are left out")
    parser.add_argument("--results", type=Path, default=ROOT / "scripts" / "mutation" / "results",
                        help="each target's result is kept here as JSON; --report renders all of them")
    parser.add_argument("--render", action="store_true",
                        help="only write --report from the kept results (after editing the equivalents, say)")
    parser.add_argument("--jobs", type=int, default=1, help="targets scored at once, each in its own copy")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 unless every target named settles: no survivor unlisted, no timeout, error "
                             "or mutant left unrun; with --render, judges the kept results (.ci/nightly)")
    parser.add_argument("--recheck", action="store_true",
                        help="run the named targets' kept survivors, timeouts and errors again against today's "
                             "tests (refused if the target's modules changed since its run)")
    parser.add_argument("--continue", dest="continue_", action="store_true",
                        help="run only the mutants the named targets' kept results left unrun at their deadline, "
                             "and add them to those results (refused if the modules changed since)")
    parser.add_argument("--note", default=None, help="a line for the report's header (say, what else ran)")
    parser.add_argument("--show", type=Path, default=None, metavar="MODULE",
                        help="list a module's mutants (JSON lines: the keys scripts/mutation/equivalent.json uses)")
    args = parser.parse_args(argv)
    args.deadline_at = None if args.deadline is None else time.monotonic() + 60 * args.deadline
    args.stop = threading.Event()  # set by a Ctrl-C
    args.kept = {}  # --continue: target name -> the kept result it continues (main)
    args.targets = [n for name in args.targets for n in (DECIDING if name == "deciding" else [name])]
    unknown = [n for n in args.targets if n not in {t.name for t in TARGETS}]
    if unknown:
        parser.error(f"unknown target(s) {unknown}; choose from {sorted(t.name for t in TARGETS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.show is not None:
        for m in list_mutants(args.show):
            print(json.dumps({"module": m.module, "function": m.function, "operator": m.operator,
                              "mutated_line": m.mutated_line, "line": m.line,
                              "occurrence": m.occurrence}, ensure_ascii=False))
        return 0
    if args.render:
        if args.report is None:
            print("--render needs --report FILE", file=sys.stderr)
            return 2
        args.report.write_text(report_from_results(args.results, None, {}, head=args.note or ""))
        return report_strictly(kept_results(args.results), args.targets or DECIDING) if args.strict else 0
    if args.recheck:
        return recheck_kept(args)
    if args.list:
        for t in TARGETS:
            print(f"{t.name:12} {' '.join(t.modules)}\n{'':12} tests: {' '.join(t.tests)} (timeout {t.timeout_s:.0f} s)")
        return 0
    args.kept = reusable_kept(args, "continue", need_unrun=True) if args.continue_ else {}
    if args.kept is None:
        return 2
    by_name = {t.name: t for t in TARGETS}
    chosen = [by_name[n] for n in dict.fromkeys(args.targets)] or TARGETS
    provenance = report_header(sys.argv[1:] if argv is None else argv, args.note)
    scores: dict[str, TargetScore] = {}
    done = threading.Lock()

    def finished(score: TargetScore) -> None:
        with done:
            score.provenance = provenance
            if score.target.name in args.kept:  # --continue: the kept result, with what this run added
                score = merge_continued(args.kept[score.target.name], score, provenance)
            scores[score.target.name] = score
            print(render_report([score], sampled=args.sample), flush=True)
            if args.sample is None:  # a sample is no result to keep
                args.results.mkdir(parents=True, exist_ok=True)
                (args.results / f"{score.target.name}.json").write_text(json.dumps(score_to_json(score), indent=1))
            if args.report is not None:  # after each target: a long run's finished targets are kept
                args.report.write_text(report_from_results(args.results, args.sample, scores))

    queue = list(chosen)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        workers: list[concurrent.futures.Future] = []
        try:
            workers += [pool.submit(work_through, queue, done, args, finished) for _ in range(args.jobs)]
            for f in workers:
                f.result()
        except KeyboardInterrupt:  # as a deadline: what ran is scored, the targets not started are left out
            args.stop.set()
            print("interrupted: scoring the mutants run so far (Ctrl-C again to leave at once)", flush=True)
            for f in workers:
                f.result()
    scores_in_order = [scores[t.name] for t in chosen if t.name in scores]
    print(render_report(scores_in_order, sampled=args.sample))
    if args.strict:
        return report_strictly(scores, [t.name for t in chosen])
    return 0 if all(s.baseline.trusted(s.target.timeout_s) for s in scores_in_order) else 1


if __name__ == "__main__":
    sys.exit(main())
