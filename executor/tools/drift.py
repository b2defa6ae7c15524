"""Drift: a completed output whose step function's source has changed since it was produced.

Code is provenance, not identity (docs/editing-code.md), so a changed function does not re-address a step;
the dry run and real runs warn instead, comparing the fingerprint of the function today with the
record's `provenance.function_sha256`. Adopted steps are compared with the record of the output
they point at. Reads only; a record that cannot be read is simply not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.core.errors import StatusError
from executor.engine import outputs
from executor.core.plan import Action, Decision, Plan
from executor.engine.provenance import function_fingerprint
from executor.core.record import record_key


@dataclass(frozen=True)
class Drift:
    name: str
    step_id: str
    function: str  # qualname today
    recorded_sha256: str
    current_sha256: str
    recorded_function: str | None
    recorded_commit: str | None
    recorded_dirty: bool | None

    def message(self) -> str:
        commit = f" at git commit {self.recorded_commit[:10]}" if self.recorded_commit else ""
        dirty = " with uncommitted changes" if self.recorded_dirty else ""
        renamed = (f" (recorded as {self.recorded_function})" if self.recorded_function
                   and not self.recorded_function.endswith(":" + self.function) else "")
        return (f"{self.name}: the source of {self.function}{renamed} changed since {self.step_id} was produced"
                f"{commit}{dirty} (function sha256 {self.recorded_sha256[:12]}… then, "
                f"{self.current_sha256[:12]}… now). The output is reused as is (code is provenance, not "
                f"identity); if the change alters what the step produces, bump its code_version or re-run it "
                f"with --force-run '^{self.name}$'.")


def _record_of(decision: Decision, prefix: str, fs: Any) -> dict | None:
    status = decision.observed.status
    rel = status.alias_of.get("output_rel") if status is not None and status.alias_of else decision.node.output_rel
    try:
        return outputs.read_record(fs, outputs.join(prefix, record_key(rel)))
    except (OSError, StatusError):
        return None


def check_decision(decision: Decision, record: dict | None) -> Drift | None:
    """The drift of one completed step, given its record (None: nothing to compare)."""
    provenance = (record or {}).get("provenance") or {}
    recorded = provenance.get("function_sha256")
    fn = decision.node.step.fn
    current = function_fingerprint(fn)
    if not recorded or not current or recorded == current:
        return None
    git = provenance.get("git") or {}
    return Drift(decision.node.name, decision.node.step_id, getattr(fn, "__qualname__", repr(fn)), recorded, current,
                 provenance.get("function"), git.get("commit"), git.get("dirty"))


def _status_says_unchanged(decision: Decision) -> bool:
    """Statuses carry the committed function's fingerprint: no record read needed when it matches."""
    status = decision.observed.status
    recorded = status.function_sha256 if status is not None and not status.alias_of else None
    return recorded is not None and recorded == function_fingerprint(decision.node.step.fn)


def find_drift(plan: Plan, prefix: str, fs: Any, parallelism: int = 16) -> list[Drift]:
    """Drift of every step the plan skips because it already succeeded (fs: the prefix's filesystem)."""
    done = [d for d in plan.by_action(Action.SKIP) if not _status_says_unchanged(d)]
    if not done:
        return []
    if outputs.is_local(prefix) or len(done) < 4:
        records = [_record_of(d, prefix, fs) for d in done]
    else:
        import concurrent.futures  # here: a local prefix, the common case, never needs a pool

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(parallelism, len(done))) as pool:
            records = list(pool.map(lambda d: _record_of(d, prefix, fs), done))
    return [drift for d, r in zip(done, records) if (drift := check_decision(d, r)) is not None]


def warn_drift(plan: Plan, prefix: str, fs: Any, reporter: Any) -> list[Drift]:
    """Print one warning per drifted step; never fails the run."""
    try:
        drifts = find_drift(plan, prefix, fs)
    except Exception as e:  # noqa: BLE001 - a warning must never break a run
        reporter.warning(f"could not check completed steps for code drift: {type(e).__name__}: {e}")
        return []
    for drift in drifts:
        reporter.warning(drift.message())
    return drifts
