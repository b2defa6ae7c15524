"""The committed ids file (`experiments/<stem>.plan.json`) and the CI check against it.

The ids file lists every step of an experiment with its id, full digest and identity document
(secrets are never in an identity); `stepgraph ids EXPERIMENT` prints it. (The `.plan.json` name
and `--update-plan` are historical: what a run decides per step is its plan, core/plan.py.) `--check` recomputes the graph without touching storage and
compares: added and removed steps, and changed ids with the differing fields, a cascade of
re-addressed dependents collapsed to its root cause. Exit 3 when anything changed; `--update-plan`
rewrites the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.core.exit_codes import ExitCode
from executor.core.errors import ExecutorError
from executor.core.graph import Graph
from executor.engine.events import Events, IdsChecked, IdsWritten
from executor.tools.identity_diff import Change, DependencyChange, cascade_summary, diff_documents, short

PLAN_SCHEMA = 1


def plan_file_path(main_file: str | Path) -> Path:
    main = Path(main_file)
    return main.parent / f"{main.stem}.plan.json"


def plan_document(graph: Graph, experiment: str) -> dict[str, Any]:
    """The ids file's content: deterministic for a given graph (no paths, times or hosts)."""
    steps = []
    for node in graph.nodes.values():
        entry: dict[str, Any] = {
            "name": node.name, "step_id": node.step_id, "digest": node.digest,
            "dependencies": [graph.nodes[d].step_id for d in (*node.deps, *node.weak_deps)],
            "identity": node.identity,
        }
        if node.output_rel != node.step_id:
            entry["output_rel"] = node.output_rel
        steps.append(entry)
    return {"schema": PLAN_SCHEMA, "experiment": experiment,
            "regenerate": f"python experiments/{experiment}.py --update-plan", "steps": steps}


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def read_plan(path: Path) -> dict[str, Any] | None:
    """The committed ids file's content, or None when there is none. Refuses newer schemas and corrupt files."""
    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text())
        schema = document["schema"]
        steps = document["steps"]
        if not isinstance(steps, list) or not all({"name", "digest", "identity"} <= set(s) for s in steps):
            raise ValueError("every step needs name, digest and identity")
    except (ValueError, KeyError, TypeError) as e:
        raise ExecutorError(f"{path} is not a valid ids file ({type(e).__name__}: {e}); "
                            f"regenerate it with --update-plan") from None
    if not isinstance(schema, int) or schema > PLAN_SCHEMA:
        raise ExecutorError(f"{path}: ids file schema {schema!r} is newer than this executor understands "
                            f"({PLAN_SCHEMA}); upgrade stepgraph (the file was left untouched)")
    return document


# -- comparing ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChangedStep:
    name: str
    old: dict[str, Any]  # ids file entries
    new: dict[str, Any]
    changes: list[Change]

    def own_changes(self, readdressed: set[str]) -> list[Change]:
        """Changes not explained by a dependency that was itself re-addressed in this comparison."""
        return [c for c in self.changes
                if not (isinstance(c, DependencyChange) and c.new_digest in readdressed)]


@dataclass
class PlanComparison:
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[ChangedStep] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.added or self.removed or self.changed)


def match_versions(old: list[dict], new: list[dict]) -> tuple[list[tuple[dict, dict]], list[dict], list[dict]]:
    """Pair entries by digest, then by name (nearest identity first). -> (changed pairs, added, removed)."""
    old_by_digest = {e["digest"]: e for e in old}
    new_left = [e for e in new if e["digest"] not in old_by_digest]
    new_digests = {e["digest"] for e in new}
    old_left = [e for e in old if e["digest"] not in new_digests]
    pairs, added = [], []
    for entry in new_left:
        candidates = [o for o in old_left if o["name"] == entry["name"]]
        if not candidates:
            added.append(entry)
            continue
        nearest = min(candidates, key=lambda o: len(diff_documents(o["identity"], entry["identity"])))
        old_left.remove(nearest)
        pairs.append((nearest, entry))
    return pairs, added, old_left


def compare_plans(old: dict[str, Any], new: dict[str, Any]) -> PlanComparison:
    pairs, added, removed = match_versions(old["steps"], new["steps"])
    changed = [ChangedStep(n["name"], o, n, diff_documents(o["identity"], n["identity"])) for o, n in pairs]
    return PlanComparison(added, removed, changed)


def describe(comparison: PlanComparison, name_of: dict[str, str]) -> list[str]:
    """Readable lines: each root cause with its fields, the cascade it caused, added and removed."""
    lines: list[str] = []
    readdressed = {c.new["digest"] for c in comparison.changed} | {e["digest"] for e in comparison.added}
    roots: list[tuple[str, list[str]]] = []
    cascaded: list[str] = []
    for step in comparison.changed:
        own = step.own_changes(readdressed)
        if not own:
            via = sorted({name_of.get(c.new_digest, short(c.new_digest)) for c in step.changes
                          if isinstance(c, DependencyChange)})
            cascaded.append(f"{step.name} (via {', '.join(via)})")
            continue
        lines.append(f"changed: {step.old['step_id']} -> {step.new['step_id']}")
        for change in own:
            lines.append("    " + (change.render(name_of.get(change.new_digest))
                                   if isinstance(change, DependencyChange) else change.render()))
        roots.append((step.name, [c.path for c in own]))
    for entry in comparison.added:
        lines.append(f"added: {entry['step_id']}")
        roots.append((entry["name"], []))
    for entry in comparison.removed:
        lines.append(f"removed: {entry['step_id']}")
    if cascaded:
        lines.append(f"re-addressed only because a dependency changed: {', '.join(cascaded)}")
    if comparison.changed and roots:
        lines.append(cascade_summary(len(comparison.changed) + len(comparison.added), roots))
    return lines


# -- the --check / --update-plan entry point ---------------------------------------------------------

def run_check(graph: Graph, main_file: str | None, *, events: Events, update: bool = False) -> int:
    """Compare (or with update=True rewrite) `<stem>.plan.json` beside the experiment file: an
    IdsChecked (IdsWritten) event to `events`, or an error line."""
    if not main_file:
        events.error("--check needs an experiment file (run `python experiments/<name>.py --check`)")
        return ExitCode.USAGE
    path = plan_file_path(main_file)
    new = plan_document(graph, Path(main_file).stem)
    try:
        old = read_plan(path)
    except ExecutorError as e:
        if not update or "newer" in str(e):  # a newer schema is never overwritten
            events.error(str(e))
            return ExitCode.USAGE
        old = None  # a corrupt ids file is what --update-plan repairs
    if update:
        text = dumps(new)
        up_to_date = path.exists() and path.read_text() == text
        if not up_to_date:
            path.write_text(text)
        events.emit(IdsWritten(str(path), len(new["steps"]), up_to_date))
        return ExitCode.OK
    if old is None:
        events.error(f"no ids file {path}; create it with `python {Path(main_file).name} --update-plan` "
                     f"and commit it")
        return ExitCode.USAGE
    comparison = compare_plans(old, new)
    if comparison.clean:
        events.emit(IdsChecked(str(path), len(new["steps"])))
        return ExitCode.OK
    name_of = {e["digest"]: e["name"] for e in (*old["steps"], *new["steps"])}
    events.emit(IdsChecked(str(path), len(new["steps"]), len(comparison.changed), len(comparison.added),
                           len(comparison.removed), tuple(describe(comparison, name_of)),
                           f"If this is intended, run `python {path.parent.name}/{Path(main_file).name} "
                           f"--update-plan` and commit {path.name}; if not, the fields above are what changed "
                           f"the ids."))
    return ExitCode.CHANGED
