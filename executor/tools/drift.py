"""Drift: a completed output whose step's code (the code it reaches) changed since it was produced.

Code is provenance, not identity (docs/editing-code.md), so a changed function does not re-address a
step; the dry run and real runs warn instead, naming each changed function. The fingerprint of
today's code (executor/engine/run/fingerprint.py) is compared with the status's compact digest first
(equal: nothing changed, no record read), then with the record's `provenance.code_fingerprint`,
function by function. A record from before fingerprints holds only the sha256 of the step
function's source: it is compared with that, and drifts only when the function's source changed.
A drift the user accepted (executor/tools/accept_drift.py) for today's fingerprint is silent.
Adopted steps are compared with the record of the output they point at. Reads only; a record that
cannot be read is simply not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.core.errors import StatusError
from executor.core.plan import Action, Decision, Plan
from executor.core.record import EXECUTOR_DIR, record_key
from executor.engine.prefix import outputs
from executor.engine.events import DriftFound, Events
from executor.engine.run.fingerprint import Fingerprint, code_fingerprint
from executor.engine.run.provenance import function_fingerprint


def accepted_key(output_rel: str, fingerprint_digest: str) -> str:
    """Where the acceptance of `fingerprint_digest` for the output at `output_rel` is (relative to the
    prefix; written by executor/tools/accept_drift.py)."""
    return f"{output_rel}/{EXECUTOR_DIR}/drift-accepted/{fingerprint_digest}.json"


@dataclass(frozen=True)
class Drift:
    name: str
    step_id: str
    digest: str  # the step's digest (its key in the plan)
    changed: tuple[str, ...]  # reached then and now, with another digest
    new: tuple[str, ...]  # reached now, not then
    gone: tuple[str, ...]  # reached then, not now
    current: str  # today's combined digest: what an acceptance names
    record_rel: str  # the output whose record was compared (an adopted step's: the one it points at)
    old_format: bool = False  # the record predates fingerprints: only the step function's source compared
    recorded_commit: str | None = None
    recorded_dirty: bool | None = None

    def what(self) -> str:
        """`helpers.transform, hello.write_text (new)`: the changed code, by name."""
        parts = [*self.changed, *(f"{n} (new)" for n in self.new), *(f"{n} (no longer reached)" for n in self.gone)]
        return ", ".join(parts) or "the reached code"

    def message(self) -> str:
        commit = f" at git commit {self.recorded_commit[:10]}" if self.recorded_commit else ""
        dirty = " with uncommitted changes" if self.recorded_dirty else ""
        old = (" (its record predates code fingerprints: the step function's source was compared, comments "
               "included, and the code it calls was not)" if self.old_format else "")
        return (f"{self.name}: {self.what()} changed since {self.step_id} was produced{commit}{dirty}{old}. "
                f"The output is reused as is (code is provenance, not identity). If the change alters what the "
                f"step produces, re-run it (--force-run '^{self.name}$', or --drift strict for every drifted "
                f"step) or bump its code_version; if it does not, `stepgraph accept-drift EXPERIMENT "
                f"{self.name} --reason TEXT` records that and silences this warning.")


def _record_rel(decision: Decision) -> str:
    status = decision.observed.status
    return status.alias_of.get("output_rel") if status is not None and status.alias_of else decision.node.output_rel


def compare(decision: Decision, record: dict | None, current: Fingerprint) -> Drift | None:
    """The drift of one completed step, given its record (None: nothing to compare)."""
    provenance = (record or {}).get("provenance") or {}
    git = provenance.get("git") or {}
    node = decision.node
    common = dict(name=node.name, step_id=node.step_id, digest=node.digest, current=current.digest,
                  record_rel=_record_rel(decision), recorded_commit=git.get("commit"), recorded_dirty=git.get("dirty"))
    recorded = Fingerprint.from_json(provenance.get("code_fingerprint"))
    if recorded is None:  # an older record: the sha256 of the step function's source only
        then, now = provenance.get("function_sha256"), function_fingerprint(node.step.fn)
        if not then or not now or then == now:
            return None
        entry = next(iter(current.functions), getattr(node.step.fn, "__qualname__", "the step function"))
        return Drift(changed=(entry,), new=(), gone=(), old_format=True, **common)
    if recorded.digest == current.digest:
        return None
    then_digests, now_digests = set(recorded.functions.values()), set(current.functions.values())
    moved = [n for n, d in current.functions.items() if d not in then_digests]
    changed = tuple(n for n in moved if n in recorded.functions)
    new = tuple(n for n in moved if n not in recorded.functions)
    gone = tuple(n for n, d in recorded.functions.items() if d not in now_digests and n not in current.functions)
    return Drift(changed=changed, new=new, gone=gone, **common)


def _status_says_unchanged(decision: Decision, current: Fingerprint) -> bool:
    """Statuses carry the committed code's combined digest (before fingerprints: the step function's
    source sha256, still equal while that source is): no record read when it matches."""
    status = decision.observed.status
    recorded = status.function_sha256 if status is not None and not status.alias_of else None
    return recorded is not None and (recorded == current.digest
                                     or recorded == function_fingerprint(decision.node.step.fn))


def _check(decision: Decision, current: Fingerprint, prefix: str, fs: Any) -> Drift | None:
    try:
        record = outputs.read_record(fs, outputs.join(prefix, record_key(_record_rel(decision))))
    except (OSError, StatusError):
        return None
    drift = compare(decision, record, current)
    if drift is None or outputs.read_bytes(fs, outputs.join(prefix, accepted_key(drift.record_rel,
                                                                                  drift.current))) is not None:
        return None
    return drift


_UNSEEN: Any = object()


def find_drift(plan: Plan, prefix: str, fs: Any, parallelism: int = 16) -> list[Drift]:
    """Drift of every step the plan skips because it already succeeded (fs: the prefix's filesystem),
    but for drifts accepted for today's code."""
    fingerprints: dict[int, Fingerprint | None] = {}  # per function, for this plan (code_fingerprint checks files)
    done = []
    for d in plan.by_action(Action.SKIP):
        fn = d.node.step.fn
        fp = fingerprints.get(id(fn), _UNSEEN)
        if fp is _UNSEEN:
            fp = fingerprints[id(fn)] = code_fingerprint(fn)
        if fp is not None and not _status_says_unchanged(d, fp):
            done.append((d, fp))
    if not done:
        return []
    if outputs.is_local(prefix) or len(done) < 4:
        found = [_check(d, fp, prefix, fs) for d, fp in done]
    else:
        import concurrent.futures  # here: a local prefix, the common case, never needs a pool

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(parallelism, len(done))) as pool:
            found = list(pool.map(lambda pair: _check(pair[0], pair[1], prefix, fs), done))
    return [drift for drift in found if drift is not None]


def warn_drift(plan: Plan, prefix: str, fs: Any, events: Events) -> list[Drift]:
    """A DriftFound event per drifted step (a warning on the console); never fails the run."""
    try:
        drifts = find_drift(plan, prefix, fs)
    except Exception as e:  # noqa: BLE001 - a warning must never break a run
        events.warning(f"could not check completed steps for code drift: {type(e).__name__}: {e}")
        return []
    for drift in drifts:
        events.emit(DriftFound(drift.name, drift.step_id, drift.what(), drift.message()))
    return drifts


def strict_reasons(plan: Plan, prefix: str, fs: Any) -> dict[str, str]:
    """--drift strict: digest -> the reason a drifted step re-runs ("code changed: helpers.transform")."""
    return {d.digest: f"code changed: {d.what()}" for d in find_drift(plan, prefix, fs)}
