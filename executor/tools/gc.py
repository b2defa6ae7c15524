"""Garbage collection of step outputs no experiment still reaches.

Reachable: every step of the given experiments (their graphs as the code declares them today, and
their committed ids files, `<stem>.plan.json`, too, so GC errs towards keeping), the outputs those
steps were adopted from (alias_of), and pinned step ids. Everything else under the prefix that is a
step output (a directory holding .executor/) is listed with its size. Deleting needs an explicit
flag and skips outputs younger than the grace period and anything whose status is RUNNING (a live
lease); `runs/` is never touched. A deletion removes the status first (so no reader takes the
output for done while its files go) and re-reads it just before, so a step that started meanwhile
is kept. A deletion the storage refuses is reported with its error and the sweep goes on with the
rest: the report says what was deleted, what was kept and why, and what could not be deleted.

Shard claims (steps/shard_reuse.py: `<folder>/.shard-claims/<step name>/<address>.json`, the leases
under which incremental data steps make each shard once) are kept while an output that is not
deleted holds that shard's result (`<output>/shard-index/<address>.json`) or the claim is RUNNING
(a live lease) or within the grace period; every other claim is collected with the outputs: a shard
result referenced only by deleted outputs leaves nothing behind.

Lineage markers (executor/engine/prefix/lineage_marks.py: the empty objects under `lineage/outputs/`
and `lineage/consumers/` each commit leaves) are deleted after the outputs when they name a
generation no status holds: the markers of the outputs just deleted, and those of a status re-written
or re-run since (`lineage --down` already ignores them; gc stops them piling up). The markers are
listed before the statuses, so a marker written meanwhile, always after its status, is never taken
for stale. `lineage/edges.json` is left alone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from executor.engine.prefix import location
from executor.engine.prefix import lineage_marks, outputs
from executor.core.errors import StatusError
from executor.engine.prefix.prefixes import OpenedPrefix
from executor.core.graph import Graph
from executor.tools.plan_file import plan_file_path, read_plan
from executor.core.record import EXECUTOR_DIR, Absent, State, Status, parse_status, status_key
from executor.engine.prefix.prefix_view import PrefixView, StepRow


@dataclass
class StepOutput:
    rel: str  # output directory relative to the prefix
    size: int = 0
    files: int = 0
    newest_mtime: float = 0.0
    row: StepRow | None = None  # its status, as the read model read it
    shard_addresses: set[str] = field(default_factory=set)  # the shard results it holds (shard-index/)

    @property
    def status(self) -> Status | None:
        return self.row.status if self.row else None

    @property
    def state(self) -> State | Absent:
        return self.row.state if self.row else Absent.NO_STATUS

    @property
    def last_written(self) -> float:
        return max(self.newest_mtime, self.status.written_at if self.status else 0.0)


SHARD_INDEX = "shard-index"  # steps/shard_reuse.py's INDEX_DIR and CLAIMS_DIR (tests/tools/test_gc_shards.py)
SHARD_CLAIMS = ".shard-claims"


@dataclass
class ShardClaim:
    rel: str  # the claim object relative to the prefix
    mtime: float = 0.0

    @property
    def address(self) -> str:
        return self.rel.rsplit("/", 1)[-1].removesuffix(".json")


@dataclass
class GcReport:
    prefix: str
    reachable: dict[str, str] = field(default_factory=dict)  # output rel -> why it is kept
    garbage: list[StepOutput] = field(default_factory=list)
    kept_present: list[StepOutput] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    spared: dict[str, str] = field(default_factory=dict)  # garbage not deleted -> why
    failed: dict[str, str] = field(default_factory=dict)  # garbage the storage refused to delete -> its error
    claims: list[ShardClaim] = field(default_factory=list)  # shard claims no kept output holds
    claims_kept: int = 0  # shard claims a kept output holds
    deleted_claims: list[str] = field(default_factory=list)
    spared_claims: dict[str, str] = field(default_factory=dict)  # claim rel -> why it was not deleted
    deleted_markers: int = 0  # lineage markers naming a generation no status holds

    @property
    def garbage_bytes(self) -> int:
        return sum(o.size for o in self.garbage)


def _mtime(info: dict[str, Any]) -> float:
    value = info.get("mtime") or info.get("LastModified") or info.get("updated") or info.get("created")
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return float(value or 0.0)


def _silent(message: str) -> None:
    pass


def list_outputs(opened: OpenedPrefix, *, say: Callable[[str], None] = _silent) -> list[StepOutput]:
    """Every step output directory under the prefix with its size, newest write and status. `say`
    hears, before each of its two long reads, what it is about to do (the command line prints it)."""
    return list_prefix(opened, say=say)[0]


def list_prefix(opened: OpenedPrefix, *,
                say: Callable[[str], None] = _silent) -> tuple[list[StepOutput], list[ShardClaim]]:
    """list_outputs, and the shard claims found by the same listing."""
    prefix, fs = opened.url, opened.filesystem
    root = location.bare_path(prefix)
    say(f"listing every object under {prefix}…")  # one call, maybe long
    # files only, on every backend (a missing folder lists nothing; a missing bucket failed the probe above)
    found = fs.find(prefix, withdirs=False, detail=True)
    files = {}
    for full, info in found.items():
        rel = location.bare_path(full)[len(root) + 1:]
        # runs/ is history; mirror/.executor/ holds the mirrored inputs' statuses (executor.engine.transfers.mirror),
        # which are no step's: their copies are never taken for one step output to delete
        if rel and not rel.startswith(("runs/", "mirror/.executor/")):
            files[rel] = info
    claims = [ShardClaim(rel, _mtime(info)) for rel, info in files.items()
              if f"/{SHARD_CLAIMS}/" in "/" + rel and rel.endswith(".json")]
    marker = f"/{EXECUTOR_DIR}/"
    steps: dict[str, StepOutput] = {}
    for rel in files:
        if marker in "/" + rel:
            step = rel[: ("/" + rel).index(marker) - 1]
            if step:
                steps.setdefault(step, StepOutput(step))
    for rel, info in files.items():
        parts = rel.split("/")
        # an object at an output's own key (a folder marker, or one named like the folder) is deleted
        # with the folder (recursive rm), so it is counted in it
        owner = next((steps["/".join(parts[:i])] for i in range(len(parts), 0, -1)
                      if "/".join(parts[:i]) in steps), None)
        if owner is not None:
            owner.size += int(info.get("size") or 0)
            owner.files += 1
            owner.newest_mtime = max(owner.newest_mtime, _mtime(info))
            inside = rel[len(owner.rel) + 1:]
            if inside.startswith(f"{SHARD_INDEX}/") and inside.endswith(".json") and inside.count("/") == 1:
                owner.shard_addresses.add(inside[len(SHARD_INDEX) + 1:].removesuffix(".json"))
    found_steps = sorted(steps.values(), key=lambda o: o.rel)
    say(f"reading {len(found_steps)} status(es)…")
    for output, row in zip(found_steps, opened.view.steps([o.rel for o in found_steps])):
        output.row = row
    return found_steps, claims


def experiment_outputs(experiment_file: str, graph: Graph | None) -> dict[str, str]:
    """Output rels an experiment reaches -> why: its graph's steps and its committed ids file's steps."""
    keep: dict[str, str] = {}
    for node in (graph.nodes.values() if graph is not None else ()):
        keep.setdefault(node.output_rel, f"step {node.name} of {experiment_file}")
    committed = read_plan(plan_file_path(experiment_file))
    for entry in (committed or {}).get("steps", []):
        keep.setdefault(entry.get("output_rel") or entry["step_id"], f"in the ids file of {experiment_file}")
    return keep


def reachable_outputs(opened: OpenedPrefix, roots: dict[str, str], pins: Iterable[str]) -> dict[str, str]:
    """Output rels to keep -> why: the roots, pinned ids, and what those were adopted from."""
    keep: dict[str, str] = dict(roots)
    for pin in pins:
        keep.setdefault(pin.strip("/"), "pinned")
    for row in opened.view.steps(list(keep)):  # one read_many
        alias_of = (row.status.alias_of or {}) if row.status else {}
        if alias_of.get("output_rel"):
            keep.setdefault(alias_of["output_rel"], f"adopted by {row.rel}")
    return keep


def collect(opened: OpenedPrefix, roots: dict[str, str], pins: Iterable[str] = (), *,
            say: Callable[[str], None] = _silent) -> GcReport:
    """roots: output rels to keep -> why (see experiment_outputs); `say`: as for list_outputs."""
    report = GcReport(opened.url, reachable_outputs(opened, roots, pins))
    found, claims = list_prefix(opened, say=say)
    for output in found:
        (report.kept_present if output.rel in report.reachable else report.garbage).append(output)
    held = _held(report.kept_present)
    report.claims = [c for c in claims if c.address not in held]
    report.claims_kept = len(claims) - len(report.claims)
    return report


def _held(found: Iterable[StepOutput]) -> dict[str, str]:
    """Shard address -> an output that holds its result."""
    return {address: o.rel for o in found for address in o.shard_addresses}


def sweep(report: GcReport, opened: OpenedPrefix, *, grace_hours: float, now: float) -> GcReport:
    """Delete the garbage older than the grace period that no runner holds, through the prefix the
    report was collected from. Returns the report."""
    view, fs = opened.view, opened.filesystem
    for output in report.garbage:
        age_h = (now - output.last_written) / 3600
        if age_h < grace_hours:
            report.spared[output.rel] = f"written {age_h:.1f} h ago, within the {grace_hours:g} h grace period"
            continue
        row = view.steps([output.rel])[0]  # re-read: a runner may have started since the listing
        if row.state is Absent.CORRUPT:  # corrupt, or written by a newer stepgraph: not ours to judge
            report.spared[output.rel] = (f"status not understood, left alone ({row.problem}); "
                                         f"inspect it, then `repair --delete-status` if it is garbage")
            continue
        if row.state is State.RUNNING:
            report.spared[output.rel] = "RUNNING: a live lease (never deleted)"
            continue
        try:
            if row.state is not Absent.NO_STATUS:
                view.store.delete(status_key(output.rel))
            fs.rm(outputs.join(report.prefix, output.rel), recursive=True)
        except Exception as e:  # noqa: BLE001 - a refusal (permissions, a retention policy): the rest go on
            report.failed[output.rel] = f"{type(e).__name__}: {e}"
            continue
        report.deleted.append(output.rel)
    _sweep_claims(report, view, grace_hours, now)
    _sweep_markers(report, view)
    return report


def _sweep_markers(report: GcReport, view: PrefixView) -> None:
    """Delete the lineage markers that name a generation no status holds (see the module's docstring)."""
    try:
        listed = view.store.list_generations(lineage_marks.LINEAGE_DIR, "")  # the markers first,
        stale = lineage_marks.stale(sorted(listed), view.list_steps())  # then the statuses
    except Exception as e:  # noqa: BLE001 - as for outputs: reported, the rest of the report stands
        report.failed[lineage_marks.LINEAGE_DIR] = f"could not list the lineage markers: {type(e).__name__}: {e}"
        return
    for key in stale:
        try:
            view.store.delete(key)
        except Exception as e:  # noqa: BLE001
            report.failed[key] = f"{type(e).__name__}: {e}"
            continue
        report.deleted_markers += 1


def _sweep_claims(report: GcReport, view: PrefixView, grace_hours: float, now: float) -> None:
    """Delete the shard claims no output left after the sweep holds, unless live or young."""
    deleted = set(report.deleted)
    held = _held(o for o in report.garbage if o.rel not in deleted)
    for claim in report.claims:
        age_h = (now - claim.mtime) / 3600
        if claim.address in held:
            report.spared_claims[claim.rel] = f"its result is held by {held[claim.address]}, which was not deleted"
            continue
        if age_h < grace_hours:
            report.spared_claims[claim.rel] = f"written {age_h:.1f} h ago, within the {grace_hours:g} h grace period"
            continue
        try:
            current = view.store.read(claim.rel)
            if current is not None and _claim_state(current.data, claim.rel) is State.RUNNING:
                report.spared_claims[claim.rel] = "RUNNING: a live lease (never deleted)"
                continue
            view.store.delete(claim.rel)
        except Exception as e:  # noqa: BLE001 - as for outputs: the rest go on
            report.failed[claim.rel] = f"{type(e).__name__}: {e}"
            continue
        report.deleted_claims.append(claim.rel)


def _claim_state(data: bytes, where: str) -> State | None:
    try:
        return parse_status(data, where).state
    except StatusError:  # a damaged claim: any runner takes it over by CAS; nothing lives in it
        return None
