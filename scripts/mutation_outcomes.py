"""What a mutation run found: the targets, each mutant's outcome, the equivalents, the report.

Kept apart from scripts/mutation.py (which copies the tree and drives cosmic-ray) so the rules that
decide a score — a timeout is not a kill, a crash is an error, an equivalent needs a reason — are
plain functions that scripts/tests/test_mutation_outcomes.py holds.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

# Operators whose mutants are mostly noise here (bit operations, exotic arithmetic swaps).
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_.*_(Pow|RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)$",
    r"core/ReplaceBinaryOperator_(Pow|RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)_.*",
    r"core/ReplaceUnaryOperator_.*Invert.*",
]


HANG_MARK = "from pytest-timeout"  # in pytest's report of a test that pytest-timeout ended


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    timeout_s: float = 120.0
    # A single test running past this is a hang (pytest-timeout ends it): the mutant is timed out,
    # found in seconds instead of at the whole timeout. Several times the target's slowest test.
    hang_s: float | None = None

    def pytest_args(self) -> list[str]:
        return [f"--timeout={self.hang_s:g}"] if self.hang_s else []


TARGETS = [
    Target("identity", ("executor/core/canonical.py", "executor/core/identity.py"),
           ("tests/executor/test_canonical.py", "tests/executor/test_identity.py",
            "tests/executor/test_canonical_reference.py", "tests/executor/test_encodings.py",
            "tests/executor/test_graph.py")),  # output_of_tag's encoding (canonical.py _TAG) is tested there
    Target("graph", ("executor/core/graph.py",), ("tests/executor/test_graph.py", "tests/executor/test_step_names.py")),
    Target("plan", ("executor/core/plan.py",),
           ("tests/executor/test_plan.py", "tests/promises/test_snapshot_and_override.py",
            "tests/cache/test_cache_from.py"), 240.0),  # the plan's set-aside of what copies were made from
    Target("lease", ("executor/engine/run/lease.py",), ("tests/executor/test_lease.py",)),
    # 150 s: seven times the quiet baseline (21 s); a mutant that hangs the run loop costs the whole timeout.
    Target("execute", ("executor/engine/run/execute.py", "executor/engine/run/jobs.py",
                       "executor/engine/run/step_job.py"),
           ("tests/executor/test_run_inline.py", "tests/promises/test_snapshot_and_override.py",
            "tests/leases/test_record_fencing.py", "tests/executor/test_staleness.py",
            "tests/executor/test_waits_and_preparation.py", "tests/executor/test_run_loop.py",
            "tests/cache/test_cache_from.py",  # the run loop's copies of another prefix's outputs
            "tests/executor/test_start_slots.py",  # the two survivors issue 46 found (slots, _fail)
            "tests/cutoff/test_cutoff.py"), 150.0,  # step_job's early cutoff and the summary's cut_off (mutrun46)
           hang_s=30.0),  # its slowest test: 8 s beside two other test runs
    Target("record", ("executor/core/record.py",),
           ("tests/executor/test_record.py", "tests/executor/test_run_inline.py", "tests/executor/test_lease.py",
            "tests/executor/test_staleness.py", "tests/executor/test_results.py"), 240.0),
    Target("retry", ("executor/engine/store/retry.py",), ("tests/store/test_retry.py", "tests/store/test_read_many.py")),
    Target("stores", ("executor/engine/store/local.py", "executor/engine/store/gcs.py", "executor/engine/store/s3.py"),
           ("tests/store/test_contract.py", "tests/store/test_errors.py", "tests/store/test_clients.py"), 240.0),
    Target("location", ("executor/engine/prefix/location.py",),  # Ray's shard tasks: tests/buckets/test_shard_tasks_on_ray.py
           ("tests/buckets/test_location.py", "tests/executor/test_locations.py",
            "tests/executor/test_location_opening.py")),
    Target("regions", ("executor/engine/transfers/regions.py",),
           ("tests/executor/test_regions.py", "tests/executor/test_region_checks.py",
            "tests/cache/test_region_guard.py", "tests/cache/test_run_region.py")),
    Target("signals", ("executor/engine/run/signals.py",), ("tests/endings/test_signal_guard.py",), 240.0),
    Target("verify-gc", ("executor/tools/verify.py", "executor/tools/gc.py"),
           ("tests/tools/test_verify.py", "tests/tools/test_verify_cases.py", "tests/tools/test_gc.py",
            "tests/tools/test_gc_cases.py",
            "tests/tools/test_gc_shards.py", "tests/tools/test_gc_lineage.py"), 240.0),  # gc's shard claims and lineage markers
    Target("dedup", ("steps/dedup",), ("tests/steps/test_dedup_exact.py", "tests/steps/test_dedup_fuzzy.py",
                                        "tests/steps/test_dedup_bad_input.py"), 240.0),
    Target("tokenize", ("steps/tokenize.py", "steps/bpe.py"), ("tests/steps/test_tokenize.py",), 240.0),
    Target("train-state", ("steps/train/state.py",),
           ("tests/promises/test_router_bias.py", "tests/steps/test_train_optim.py")),
    Target("checkpoints", ("steps/train/checkpoint.py", "steps/train/sharded_checkpoint.py"),
           ("tests/steps/test_sharded_checkpoint.py", "tests/steps/test_checkpoint_object_store.py"), 300.0),
    Target("eval", ("steps/eval",), ("tests/steps/test_eval.py",), 240.0),
]


class Outcome(str, Enum):
    KILLED = "killed"
    SURVIVED = "survived"
    EQUIVALENT = "equivalent"
    TIME_OR_COST = "time or cost"  # survived, listed: it differs only in time or cost, which no test measures
    TIMED_OUT = "timed out"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Baseline:
    """The target's tests on unmutated code."""
    passed: bool
    seconds: float
    tail: str = ""

    def trusted(self, timeout_s: float) -> bool:
        """Scores count only when the unmutated tests pass well within the timeout."""
        return self.passed and self.seconds <= timeout_s / 2

    def why_refused(self, timeout_s: float) -> str:
        if not self.passed:
            return f"baseline failed after {self.seconds:.0f} s: {self.tail.strip().splitlines()[-1:] or ['']}"
        return f"baseline took {self.seconds:.0f} s, over half the {timeout_s:.0f} s timeout"


@dataclass(frozen=True)
class Mutant:
    module: str
    line: int
    function: str | None
    operator: str
    mutated_line: str     # the line the mutant adds (from its diff): with line and occurrence, what equivalents match
    diff: str
    outcome: Outcome
    occurrence: int | None = None  # cosmic-ray's index of this operator's mutation point in the module
    seconds: float | None = None   # its tests' time (scripts/mutation_select.py prints it; None: not kept)
    output: str = ""               # the first lines of its tests' output (kept from this change on)


@dataclass
class TargetScore:
    target: Target
    baseline: Baseline
    mutants: list[Mutant] = field(default_factory=list)
    seconds: float = 0.0            # the whole target: coverage run, then every mutant
    coverage_seconds: float = 0.0   # the coverage run that selects each mutant's tests
    covered_lines: int = 0
    pending: int = 0                # mutants left unrun when the run's deadline came
    provenance: str = ""            # the command, commit, time and load it was measured with
    # each module file the run mutated -> its sha256 when the run began, and that day (UTC): what the
    # kept result measured; a result whose modules differ from these now is stale (stale_since)
    module_sha256: dict[str, str] = field(default_factory=dict)
    measured_on: str = ""
    stale: str = ""                 # set when a kept result is loaded against a tree (not stored)

    def counts(self) -> Counter:
        return Counter(m.outcome for m in self.mutants)


def module_files(target: Target, root: Path) -> list[str]:
    """The target's modules as files under `root` (a directory stands for the .py files under it)."""
    files = []
    for module in target.modules:
        path = root / module
        files += sorted(str(p.relative_to(root)) for p in path.rglob("*.py")) if path.is_dir() else [module]
    return files


def module_shas(target: Target, root: Path) -> dict[str, str]:
    """Each of the target's module files under `root` -> the sha256 of its bytes (what a run records)."""
    return {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in module_files(target, root)}


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def stale_since(score: TargetScore, root: Path) -> str:
    """"" when the target's modules under `root` are byte for byte those its kept run mutated, else
    what changed: a module whose sha256 differs, one the run did not mutate (added to the target
    since), one gone, or no sha256 recorded at all."""
    if not score.module_sha256:
        return "the run recorded no sha256 of its modules"
    now = module_shas(score.target, root)
    changed = [f for f in now if f in score.module_sha256 and now[f] != score.module_sha256[f]]
    added = [f for f in now if f not in score.module_sha256]
    gone = [f for f in score.module_sha256 if f not in now]
    what = ([f"{', '.join(changed)} changed"] if changed else []) + \
           ([f"{', '.join(added)} not mutated by it"] if added else []) + ([f"{', '.join(gone)} gone"] if gone else [])
    return "; ".join(what)


def stale_text(score: TargetScore) -> str:
    """How a stale result is named wherever it would be read as a score."""
    return f"stale: code changed since this run ({score.measured_on or 'undated'}): {score.stale}"


def unsettled(score: TargetScore) -> list[str]:
    """What keeps a target's result from standing as a full, trusted score (empty when it stands):
    a result of code that has changed since, a refused baseline, survivors not listed as
    equivalent, timeouts, errors, mutants left unrun."""
    if score.stale:
        return [stale_text(score)]
    if not score.baseline.trusted(score.target.timeout_s):
        return [score.baseline.why_refused(score.target.timeout_s)]
    counts = score.counts()
    found = [f"{counts[o]} {o.value}" for o in (Outcome.SURVIVED, Outcome.TIMED_OUT, Outcome.ERROR) if counts[o]]
    return found + ([f"{score.pending} not run (deadline)"] if score.pending else [])


def classify(worker_outcome: str, test_outcome: str | None, output: str | None) -> Outcome:
    """One mutant's outcome from cosmic-ray's result (its values, as strings)."""
    if worker_outcome == "skipped":
        return Outcome.SKIPPED
    if worker_outcome != "normal" or test_outcome not in ("killed", "survived"):
        return Outcome.ERROR          # the worker crashed, or the tests could not run (incompetent)
    if test_outcome == "survived":
        return Outcome.SURVIVED
    # cosmic-ray reports a test run past its timeout as KILLED with this exact output; a test that
    # pytest-timeout ended (Target.hang_s) failed by the clock too
    output = output or ""
    return Outcome.TIMED_OUT if output.strip() == "timeout" or HANG_MARK in output else Outcome.KILLED


def added_line(diff: str | None) -> str:
    """The first line a mutant's unified diff adds, stripped ("" if none)."""
    for line in (diff or "").splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return ""


def load_equivalents(path: Path) -> list[dict]:
    """Listed equivalents: module, function, operator, mutated_line and a reason a reviewer can check."""
    entries = json.loads(path.read_text()) if path.exists() else []
    for e in entries:
        missing = {"module", "function", "operator", "mutated_line", "line", "occurrence", "reason"} - set(e)
        if missing or not e.get("reason", "").strip():
            raise ValueError(f"{path}: equivalent {e} lacks {sorted(missing) or ['a reason']}")
        if e.get("kind", "equivalent") not in KINDS:
            raise ValueError(f"{path}: equivalent {e}: kind {e['kind']!r} is not one of {sorted(KINDS)}")
    return entries


KINDS = {"equivalent": Outcome.EQUIVALENT, "time or cost": Outcome.TIME_OR_COST}


def matches(e: dict, m: Mutant) -> bool:
    """An entry names one mutant: module, function, operator, mutated line, line and (where the
    mutant's is known) occurrence; the same text on another line is another mutant."""
    return (e["module"] == m.module and e["function"] == m.function and e["operator"] == m.operator
            and e["mutated_line"] == m.mutated_line and e["line"] == m.line
            and (m.occurrence is None or e["occurrence"] == m.occurrence))


def listed_as(m: Mutant, equivalents: list[dict]) -> Outcome | None:
    """EQUIVALENT or TIME_OR_COST where an entry names the mutant, else None."""
    return next((KINDS[e.get("kind", "equivalent")] for e in equivalents if matches(e, m)), None)


def is_listed_equivalent(m: Mutant, equivalents: list[dict]) -> bool:
    return listed_as(m, equivalents) is not None


def score_session(target: Target, baseline: Baseline, session: Path, equivalents: list[dict]) -> TargetScore:
    from cosmic_ray.work_db import WorkDB, use_db

    score = TargetScore(target=target, baseline=baseline)
    with use_db(str(session), WorkDB.Mode.open) as db:
        score.pending = sum(1 for _ in db.pending_work_items)
        for item, result in db.completed_work_items:
            outcome = classify(str(result.worker_outcome.value),
                               result.test_outcome.value if result.test_outcome else None, result.output)
            spec = item.mutations[0]
            mutant = Mutant(module=str(spec.module_path), line=spec.start_pos[0], function=spec.definition_name,
                            operator=spec.operator_name, mutated_line=added_line(result.diff),
                            diff=result.diff or "", outcome=outcome, occurrence=spec.occurrence,
                            seconds=tests_seconds(result.output), output=first_lines(result.output))
            if outcome is Outcome.SURVIVED and listed_as(mutant, equivalents):
                mutant = Mutant(**{**mutant.__dict__, "outcome": listed_as(mutant, equivalents)})
            score.mutants.append(mutant)
    return score


SECONDS_MARK = "mutation_select: tests took "  # the last line scripts/mutation_select.py prints


def tests_seconds(output: str | None) -> float | None:
    """A mutant's tests' time, from the line scripts/mutation_select.py ends its output with."""
    for line in reversed((output or "").splitlines()):
        if line.startswith(SECONDS_MARK):
            return float(line[len(SECONDS_MARK):].split()[0])
    return None


def first_lines(output: str | None, n: int = 6) -> str:
    """What a reader needs to tell a slow survivor from a hang: the output's first lines, and
    pytest's summary lines of what failed (a "Timeout" there is a hang limit's)."""
    lines = (output or "").strip().splitlines()
    failed = [line for line in lines[n:] if line.startswith(("FAILED ", "ERROR "))][:n]
    return "\n".join(lines[:n] + (["..."] + failed if failed else []))


def session_progress(name: str, session: Path, seconds: float) -> str:
    """One progress line from cosmic-ray's session database, read while its exec writes it."""
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(session), WorkDB.Mode.open) as db:
        total = db.num_work_items
        counts = Counter(classify(str(r.worker_outcome.value), r.test_outcome.value if r.test_outcome else None,
                                  r.output) for _, r in db.results)
    to_run = total - counts.pop(Outcome.SKIPPED, 0)
    so_far = ", ".join(f"{n} {o.value}" for o, n in counts.items())
    return f"{name}: {sum(counts.values())} of {to_run} mutants run ({so_far or 'none yet'}), {seconds / 60:.0f} min"


def score_text(c: Counter) -> str:
    """killed / (killed + survived + timed out + errors): a timeout or an error is not a kill, and
    not left out either (it is a mutant whose fate is unknown); listed equivalents and time-or-cost
    mutants are left out. 100.0% only when every mutant so counted was killed."""
    counted = c[Outcome.KILLED] + c[Outcome.SURVIVED] + c[Outcome.TIMED_OUT] + c[Outcome.ERROR]
    if not counted:
        return "-"
    pct = 100 * c[Outcome.KILLED] / counted
    return f"{pct:.1f}%" if c[Outcome.KILLED] == counted else f"{min(pct, 99.9):.1f}%"


def settled_head(scores: list[TargetScore], wanted: list[str] | None) -> list[str]:
    """The report's first lines: how many of the wanted targets settle (what `--render --strict`
    judges), which are stale (their code changed since their run: no score of theirs stands), and
    each other unsettled one with why."""
    by_name = {s.target.name: s for s in scores}
    wanted = wanted if wanted is not None else list(by_name)
    open_ = {n: unsettled(by_name[n]) if n in by_name else ["no result"] for n in wanted}
    settled = [n for n, why in open_.items() if not why]
    stale = {n: by_name[n] for n in wanted if n in by_name and by_name[n].stale}
    unsure = {n: why for n, why in open_.items() if why and n not in stale}
    lines = [f"**Settled {len(settled)} of {len(wanted)}** (`scripts/mutation.sh --render --strict` "
             f"exits {1 if len(settled) < len(wanted) else 0} on these results: a target settles when its "
             "result is of today's code, every mutant killed or listed, with a trusted baseline, nothing timed "
             "out, in error or left unrun)."]
    lines += ["", f"Settled: {', '.join(settled) or 'none'}."]
    if stale:
        lines += ["", "Stale (the code changed since the run: its figures are not shown as a score; "
                  "re-run the target):"] + [f"- {n}: {stale_text(s).removeprefix('stale: ')}" for n, s in stale.items()]
    if unsure:
        lines += ["", "Unsettled:"] + [f"- {n}: {', '.join(why)}" for n, why in unsure.items()]
    return lines + [""]


def render_report(scores: list[TargetScore], sampled: int | None, wanted: list[str] | None = None,
                  head: str = "") -> str:
    kind = f"a seeded sample of {sampled} mutants per target" if sampled else "every mutant (a full run)"
    lines = [f"# Mutation report: {kind}", "", *settled_head(scores, wanted)]
    lines += [head, ""] if head else []
    lines += ["Regenerated by `scripts/mutation.sh --jobs 2 --report scripts/mutation/report.md deciding` (or any "
              "targets: their results in scripts/mutation/results/ are replaced, the others kept). Where and when "
              "each target was measured is listed under the table.", "",
              "| target | baseline | mutants | killed | survived | equivalent | time or cost | timed out | errors "
              "| score | run |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in scores:
        if s.stale:
            lines.append(f"| {s.target.name} | {stale_text(s)} | | | | | | | | | {s.seconds:.0f} s |")
            continue
        if not s.baseline.trusted(s.target.timeout_s):
            lines.append(f"| {s.target.name} | refused: {s.baseline.why_refused(s.target.timeout_s)} "
                         "| | | | | | | | | |")
            continue
        c = s.counts()
        run = sum(c.values()) - c[Outcome.SKIPPED]
        mutants = f"{run} of {run + s.pending} (deadline)" if s.pending else f"{run}"
        lines.append(f"| {s.target.name} | {s.baseline.seconds:.0f} s of {s.target.timeout_s:.0f} | "
                     f"{mutants} | {c[Outcome.KILLED]} | {c[Outcome.SURVIVED]} | {c[Outcome.EQUIVALENT]} | "
                     f"{c[Outcome.TIME_OR_COST]} | {c[Outcome.TIMED_OUT]} | {c[Outcome.ERROR]} | "
                     f"{score_text(c)} | {s.seconds:.0f} s |")
    lines += ["", "Score = killed / (killed + survived + timed out + errors): a timeout or an error is not a kill "
              "and stays in the count (its mutant's fate is unknown); listed equivalents (no run can tell them "
              "from the code) and time-or-cost mutants (they differ only in how long or how much, which no test "
              "measures; not equivalent) are left out. Baseline: the target's tests, unmutated, of the timeout; a "
              "continued or re-checked run's own baseline is in its line below. Run: the whole target (a coverage "
              "run of its tests, then each mutant: the tests covering the mutated line, and all its tests if "
              "those pass; scripts/mutation_select.py). \"of N (deadline)\": the run's --deadline came first; "
              "the rest of that target's mutants were not run. \"stale\": the sha256 of a module the run "
              "mutated (recorded when it began) differs from today's, or the target has a module the run did "
              "not mutate; its kept figures are of other code, so none is shown, and its open mutants are not "
              "listed below (they stay in its result file).", ""]
    lines += [f"- {s.target.name}: {s.provenance}" for s in scores if s.provenance] + [""]
    for s in scores:
        for m in [] if s.stale else s.mutants:
            if m.outcome in (Outcome.SURVIVED, Outcome.TIMED_OUT, Outcome.ERROR):
                took = f"{m.seconds:.1f} s" if m.seconds is not None else "time not kept (run before it was)"
                lines += [f"## {m.outcome.value}: {m.module}:{m.line} {m.function} {m.operator}", "",
                          f"Tests: {took}." + ("" if m.output else " Output not kept (run before it was)."), "",
                          "```diff", m.diff.strip(), "```", ""]
                if m.output:
                    lines += ["```text", m.output, "```", ""]
    return "\n".join(lines)


def list_mutants(module_path: Path, keys: Collection[tuple[str, str]] | None = None) -> list[Mutant]:
    """The mutants cosmic-ray would make of one module (not run), or only those whose (function,
    operator) is in `keys`: what an equivalent is listed by. Enumerating a module's mutation points
    takes seconds and each mutant re-parses the module, so ask once per module, filtered."""
    from cosmic_ray.commands.init import _all_work_items  # what `cosmic-ray init` enumerates

    source = module_path.read_text()
    found = []
    for item in _all_work_items([module_path], {}):
        spec = item.mutations[0]
        if keys is not None and (spec.definition_name, spec.operator_name) not in keys:
            continue
        diff = mutant_diff(source, spec, module_path)
        found.append(Mutant(module=str(module_path), line=spec.start_pos[0], function=spec.definition_name,
                            operator=spec.operator_name, mutated_line=added_line(diff), diff=diff,
                            outcome=Outcome.SKIPPED, occurrence=spec.occurrence))
    return found


def mutant_diff(source: str, spec, module_path: Path) -> str:
    """The diff cosmic-ray records for the mutant `spec` (a MutationSpec) of `source`, made as it makes it."""
    from cosmic_ray.mutating import _make_diff, mutate_code
    from cosmic_ray.plugins import get_operator

    mutated = mutate_code(source, get_operator(spec.operator_name)(**spec.operator_args), spec.occurrence)
    return "\n".join(_make_diff(source, mutated or source, module_path))


def score_to_json(score: TargetScore) -> dict:
    """One target's result as stored under scripts/mutation/results/ (the report is rendered from these)."""
    return {"target": score.target.name, "baseline": asdict(score.baseline), "seconds": score.seconds,
            "coverage_seconds": score.coverage_seconds, "covered_lines": score.covered_lines,
            "pending": score.pending, "provenance": score.provenance,
            "module_sha256": score.module_sha256, "measured_on": score.measured_on,
            "mutants": [{**asdict(m), "outcome": m.outcome.value,
                         "diff": "" if m.outcome is Outcome.KILLED else m.diff}  # the report shows no killed diff
                        for m in score.mutants]}


def score_from_json(data: dict, targets: list[Target]) -> TargetScore:
    [target] = [t for t in targets if t.name == data["target"]]
    mutants = [Mutant(**{**m, "outcome": Outcome(m["outcome"])}) for m in data["mutants"]]
    return TargetScore(target=target, baseline=Baseline(**data["baseline"]), mutants=mutants,
                       seconds=data["seconds"], coverage_seconds=data["coverage_seconds"],
                       covered_lines=data["covered_lines"], pending=data["pending"], provenance=data["provenance"],
                       module_sha256=data.get("module_sha256", {}), measured_on=data.get("measured_on", ""))


def reclassify(score: TargetScore, equivalents: list[dict]) -> TargetScore:
    """A kept score against the equivalents listed now: a survivor listed since is equivalent, an
    equivalent no longer listed is a survivor again."""
    def judged(m: Mutant) -> Mutant:
        if m.outcome in (Outcome.SURVIVED, Outcome.EQUIVALENT, Outcome.TIME_OR_COST):
            outcome = listed_as(m, equivalents) or Outcome.SURVIVED
            return Mutant(**{**m.__dict__, "outcome": outcome})
        return m
    return TargetScore(**{**score.__dict__, "mutants": [judged(m) for m in score.mutants]})
