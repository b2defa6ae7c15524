"""Early cutoff: a step under a new id whose dependencies' outputs are exactly what an earlier output
of it consumed is not run; its new id points at that earlier output.

When a step with no output at its new id becomes ready (its dependencies committed) and holds its lease,
the run looks for an earlier output of the same step name under the prefix (`<prefix>/<name>-*`,
SUCCESS) whose identity document differs from the new one only in dependency digests, where each
dependency's output as the earlier step consumed it (its manifest digest, `content_sha256`, in the
earlier record) equals the output the dependency holds now. Found: the new id is committed, under the
step's lease and by the normal fenced CAS, as a SUCCESS alias of that output (`alias_of`, as a reviewed
`adopt` writes it, with `cut_off` naming the evidence), and its record lists which dependency's
manifest digest matched. Its dependents see an unchanged output and may be cut off in turn. Anything
else runs the step: a config or code_version difference, a dependency whose consumed digest is unknown
or differs, an unreadable record. Identical manifest digests only, never a guess.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from executor.core.errors import StatusError
from executor.core.graph import StepNode
from executor.core.record import State, Status, StepRecord, parse_status, record_key
from executor.engine.prefix import outputs
from executor.engine.run.jobs import Board
from executor.engine.run.lease import Lease

STATUS_SUFFIX = "/.executor/status.json"


@dataclass(frozen=True)
class Match:
    """One dependency whose re-addressed output is byte for byte (by manifest digest) the one consumed."""

    name: str  # the dependency's step name
    old_digest: str  # the dependency the earlier output consumed
    new_digest: str  # the dependency now
    content_sha256: str  # the manifest digest both hold

    def to_json(self) -> dict[str, str]:
        return dict(vars(self))


@dataclass(frozen=True)
class Cutoff:
    """The earlier output a step's new id points at, and the evidence."""

    target: dict[str, str]  # step_id, digest, output_rel of the output (an alias's target: one hop)
    content_sha256: str | None  # the target's manifest digest
    matches: tuple[Match, ...]

    @property
    def reason(self) -> str:
        """"cut off: upper's output unchanged (manifest sha256 3f2a9c0d1e2b…)"."""
        names = " and ".join(f"{m.name}'s" for m in self.matches)
        digests = ", ".join(f"{m.content_sha256[:12]}…" for m in self.matches)
        plural = "outputs" if len(self.matches) > 1 else "output"
        return f"cut off: {names} {plural} unchanged (manifest sha256 {digests})"


def match(record: Mapping[str, Any], node: StepNode, now: Mapping[str, str]) -> tuple[Match, ...] | None:
    """The evidence that the earlier output `record` describes is what `node` would make: its identity
    differs only in dependency digests, and every blocking dependency's manifest digest as consumed then
    equals the one committed now (`now`: digest -> content_sha256). None otherwise."""
    renamed: dict[str, str] = {}
    if not _only_dependencies_differ(record.get("identity"), node.identity, renamed) or not renamed:
        return None
    consumed = {d.get("digest"): d.get("content_sha256") for d in record.get("dependencies") or []
                if isinstance(d, dict) and d.get("blocking", True)}
    if set(renamed) - set(now):  # a re-addressed weak or unknown dependency: its content is not known
        return None
    matches = []
    for dep, content in now.items():
        old = renamed.get(dep, dep)
        if consumed.get(old) != content:
            return None
        if dep in renamed:
            name = next((d.get("name") for d in record["dependencies"] if d.get("digest") == old), None) or "?"
            matches.append(Match(name, old, dep, content))
    return tuple(matches)


def _only_dependencies_differ(old: Any, new: Any, renamed: dict[str, str]) -> bool:
    """Whether two identity documents (executor/core/canonical.py's encoding: a dependency is
    {"dependency": digest, "sub": ...}) are equal but for dependency digests; fills `renamed` (new digest
    -> old digest), refusing a new digest that stands for two old ones."""
    if old == new:
        return True
    if isinstance(old, dict) and isinstance(new, dict):
        if "dependency" in old and "dependency" in new and old.keys() == new.keys():
            if any(old[k] != new[k] for k in old if k != "dependency"):
                return False
            return renamed.setdefault(new["dependency"], old["dependency"]) == old["dependency"]
        return old.keys() == new.keys() and all(_only_dependencies_differ(old[k], new[k], renamed) for k in old)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_only_dependencies_differ(a, b, renamed) for a, b in zip(old, new))
    return False


def outputs_named(fs: Any, prefix: str, name: str, listed: dict[str, list[str]]) -> list[str]:
    """Output dirs (relative to the prefix) of step `name`: `<folder>/<leaf>-*`, from one shallow listing
    of its folder (kept in `listed`, by folder), never a walk through the outputs' own files."""
    folder, _, leaf = name.rpartition("/")
    if folder not in listed:
        try:
            entries = fs.ls(outputs.join(prefix, folder), detail=False)
        except FileNotFoundError:
            entries = []
        listed[folder] = sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)
    return [f"{folder}/{b}" if folder else b for b in listed[folder] if b.rsplit("-", 1)[0] == leaf]


def find(store: Any, fs: Any, prefix: str, node: StepNode, now: Mapping[str, str],
         listed: dict[str, list[str]]) -> Cutoff | None:
    """The most recently finished earlier SUCCESS of `node`'s name that `match` vouches for (`listed`:
    the folder listings outputs_named made so far)."""
    rels = [r for r in outputs_named(fs, prefix, node.name, listed) if r != node.output_rel]
    if not rels:
        return None
    best: tuple[float, Cutoff] | None = None
    for rel, versioned in zip(rels, store.read_many([f"{r}{STATUS_SUFFIX}" for r in rels])):
        try:
            status = parse_status(versioned.data, rel) if versioned is not None else None
            record = outputs.read_record(fs, outputs.join(prefix, record_key(rel))) if status else None
        except (OSError, StatusError):
            continue  # an unreadable status or record cannot vouch for an output
        if status is None or status.state != State.SUCCESS or record is None or record.get("digest") != status.digest:
            continue
        found = match(record, node, now)
        if found is None:
            continue
        finished = float((record.get("timings") or {}).get("finished_at") or 0.0)
        if best is None or finished > best[0]:
            best = (finished, Cutoff(_target(status, rel), status.content_sha256, found))
    return best[1] if best else None


def _target(status: Status, rel: str) -> dict[str, str]:
    if status.alias_of:
        return {k: status.alias_of[k] for k in ("step_id", "digest", "output_rel")}
    return {"step_id": status.step_id, "digest": status.digest, "output_rel": rel}


class Cutoffs:
    """The run loop's early cutoff: tried once a ready step holds its lease, before it is submitted."""

    def __init__(self, board: Board, config_to_json: Callable[[Any], Any]):
        self.board = board
        self.config_to_json = config_to_json  # step_job.config_to_json: the record's resolved config, secrets out
        # Each folder's listing, made once, when a step in it first could be cut off. Outputs committed
        # later in the run are not in it: missing a candidate only means the step runs.
        self.listed: dict[str, list[str]] = {}

    def consumed_now(self, node: StepNode) -> dict[str, str] | None:
        """Dependency digest -> manifest digest of each blocking dependency's committed output; None when
        one is unknown (then nothing can be proven and the step runs)."""
        found = {}
        for dep in node.deps:
            job = self.board.steps.get(dep)
            if job is None or not job.content:
                return None
            found[dep] = job.content
        return found

    def find_for(self, node: StepNode, now: Mapping[str, str]) -> Cutoff | None:
        """The earlier output `node`'s new id may point at, if any (never an error: running is safe)."""
        ctx = self.board.ctx
        try:
            return find(ctx.store, ctx.fs, ctx.prefix, node, now, self.listed)
        except Exception as e:  # noqa: BLE001 - running the step is always safe
            ctx.events.warning(f"{node.name}: could not look for an earlier output to cut off at "
                               f"({type(e).__name__}: {e}); running it")
            return None

    def commit(self, node: StepNode, lease: Lease, found: Cutoff, consumed: Mapping[str, str]) -> bool:
        """The record, then the fenced SUCCESS alias of `found` under `lease`. False: the lease was lost."""
        keeper = self.board.ctx.keeper
        # The record is written before the fenced commit: the lease must be ours (or ours again,
        # when only our own silence let it lapse: no function ran on it, see LeaseKeeper.reclaim).
        if not keeper.confirm(lease) and not keeper.reclaim(lease):
            return False
        wall = self.board.ctx.wall_clock()
        alias_of = {**found.target, "declared_by": f"early cutoff (run {self.board.ctx.owner.run_id})",
                    "declared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall)),
                    "reason": found.reason, "cut_off": found.reason}
        self._write_record(node, lease, found, consumed, alias_of, wall)
        final = lease.status.next(state=State.SUCCESS, written_at=wall, alias_of=alias_of,
                                  content_sha256=found.content_sha256, inputs=dict(consumed) or None)
        if not keeper.finish(lease, final):
            return False
        self.board.marks.submit(node.output_rel, final, lease.generation,
                          {"dependencies": [{"digest": d} for d in (*node.deps, *node.weak_deps)],
                           "identity": node.identity})
        return True

    def _write_record(self, node: StepNode, lease: Lease, found: Cutoff, consumed: Mapping[str, str],
                      alias_of: dict[str, str], wall: float) -> None:
        """The new id's record: its identity, the dependencies it stands on (with the manifest digests
        they hold, so its own dependents can be cut off in turn) and the evidence."""
        board, ctx = self.board, self.board.ctx
        deps = [{"name": board.graph.nodes[d].name, "step_id": board.graph.nodes[d].step_id, "digest": d,
                 "path": board.dep_path(d), "blocking": d in node.deps, "content_sha256": consumed.get(d)}
                for d in (*node.deps, *node.weak_deps)]
        record = StepRecord(
            step_id=node.step_id, digest=node.digest, name=node.name, identity=node.identity,
            config=self.config_to_json(board.resolve_config(node)),  # its paths: the outputs it stands on
            dependencies=deps, provenance={**ctx.invocation, "cut_off": True}, result=None, manifest=[],
            timings={"started_at": wall, "finished_at": wall, "seconds": 0.0}, attempt=lease.status.attempt,
            run_id=ctx.owner.run_id,
            extra={"adopted_from": alias_of, "cut_off": [m.to_json() for m in found.matches]})
        ctx_path = outputs.join(ctx.prefix, record_key(node.output_rel))
        outputs.write_json(ctx.fs, ctx_path, record.to_bytes())


__all__ = ["Cutoff", "Cutoffs", "Match", "find", "match", "outputs_named"]
