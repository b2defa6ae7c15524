"""Why does a step have a new id? Diff against its nearest earlier version, down to the root cause.

Earlier versions come from records on storage (`<prefix>/<name>-*/.executor/record.json` hold the
identity document) and from the committed ids file (`<stem>.plan.json`). The nearest one is the
candidate whose identity differs in the fewest places (ties: the most recently finished). A
dependency whose digest changed is followed into that dependency's own diff against exactly the old
digest, so a cascade is collapsed to the change that started it ("4 steps re-addressed by 1 change
in hello/greeting: config.greeting"). Reads only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from executor.core.exit_codes import ExitCode
from executor.core.errors import StatusError
from executor.engine.prefix import outputs
from executor.engine.events import ChangeNoted, Events, StepExplained
from executor.core.graph import Graph, StepNode
from executor.tools.identity_diff import DependencyChange, FieldChange, cascade_summary, diff_documents, short
from executor.core.plan import Action, Plan
from executor.tools.plan_file import plan_file_path, read_plan
from executor.core.record import EXECUTOR_DIR

if TYPE_CHECKING:
    from executor.engine.prefix.prefixes import OpenedPrefix


@dataclass(frozen=True)
class Version:
    """One known version of a step: its identity document and where it was found."""

    name: str
    step_id: str
    digest: str
    identity: dict[str, Any]
    source: str  # "storage" (the prefix), "ids file", or "cache-from PREFIX"
    finished_at: float = 0.0
    cut_off: str | None = None  # an early cutoff's record: why it was not run ("cut off: …")


class EarlierVersions:
    """Versions of steps found on storage and in the committed ids file, by name and by digest."""

    def __init__(self, versions: Iterable[Version] = ()):
        self.by_digest: dict[str, Version] = {}
        self.by_name: dict[str, list[Version]] = {}
        for v in versions:
            self.add(v)

    def add(self, v: Version) -> None:
        if v.digest in self.by_digest:
            return  # storage wins over the ids file: it is loaded first
        self.by_digest[v.digest] = v
        self.by_name.setdefault(v.name, []).append(v)

    def nearest(self, node: StepNode) -> Version | None:
        """The version of this step's name, other than itself, whose identity differs least."""
        candidates = [v for v in self.by_name.get(node.name, []) if v.digest != node.digest]
        if not candidates:
            return None
        return min(candidates, key=lambda v: (len(diff_documents(v.identity, node.identity)), -v.finished_at))

    @classmethod
    def gather(cls, names: Iterable[str], prefix: str | None, main_file: str | None, *, fs: Any = None,
               cache_from: Sequence[OpenedPrefix] = ()) -> "EarlierVersions":
        """From the prefix's records (read through `fs`, the filesystem it was opened with), then the
        cache-from prefixes' (in order, through each one's filesystem as the plan opened it), then the ids file."""
        versions = cls()
        names = sorted(set(names))
        if prefix is not None:
            for v in versions_on_storage(prefix, names, fs):
                versions.add(v)
        for other in cache_from:
            for v in versions_on_storage(other.url, names, other.fs, source=f"cache-from {other.url}"):
                versions.add(v)
        if main_file:
            plan = read_plan(plan_file_path(main_file))
            for e in (plan or {}).get("steps", []):
                versions.add(Version(e["name"], e.get("step_id", e["name"]), e["digest"], e["identity"], "ids file"))
        return versions


def versions_on_storage(prefix: str, names: Iterable[str], fs: Any, source: str = "storage") -> list[Version]:
    """Records of earlier runs of these step names under the prefix, read through its filesystem `fs`
    (any state of their status)."""
    found = []
    for name in sorted(set(names)):
        try:
            paths = fs.glob(outputs.join(prefix, f"{name}-*", EXECUTOR_DIR, "record.json"))
        except (FileNotFoundError, OSError):
            continue
        for path in paths:
            try:
                record = outputs.read_record(fs, path)
            except (OSError, StatusError):
                continue  # unreadable or newer: not a version to compare with
            if record is None or record.get("name") != name or "identity" not in record:
                continue
            finished = float((record.get("timings") or {}).get("finished_at") or 0.0)
            cut_off = ((record.get("extra") or {}).get("adopted_from") or {}).get("cut_off")
            found.append(Version(name, record["step_id"], record["digest"], record["identity"], source, finished,
                                 cut_off))
    return found


# -- the explanation tree ------------------------------------------------------------------------

@dataclass
class StepExplanation:
    """How one step's identity differs from an earlier version, dependencies followed."""

    name: str
    new_id: str
    old: Version | None
    fields: list[FieldChange] = field(default_factory=list)
    dependencies: list[tuple[DependencyChange, "StepExplanation | None"]] = field(default_factory=list)

    def walk(self) -> list["StepExplanation"]:
        """This explanation and every dependency explanation under it, each once (DAGs share them)."""
        seen: dict[int, StepExplanation] = {}
        stack = [self]
        while stack:
            e = stack.pop()
            if id(e) not in seen:
                seen[id(e)] = e
                stack.extend(sub for _, sub in reversed(e.dependencies) if sub is not None)
        return list(seen.values())

    def readdressed(self) -> set[str]:
        """step ids re-addressed in this cascade (this step included)."""
        return {e.new_id for e in self.walk()}

    def roots(self) -> list[tuple[str, list[str]]]:
        """(step name, changed paths) of every change that is not just a re-addressed dependency."""
        found: list[tuple[str, list[str]]] = []
        for e in self.walk():
            own = [c.path for c in e.fields]
            own += [f"dependency {c.path} (earlier version not found)" for c, sub in e.dependencies if sub is None]
            if (own or e.old is None) and (e.name, own) not in found:
                found.append((e.name, own))
        return found


def explain_node(graph: Graph, node: StepNode, old: Version | None, versions: EarlierVersions,
                 seen: dict[tuple[str, str], StepExplanation] | None = None) -> StepExplanation:
    seen = {} if seen is None else seen
    key = (node.digest, old.digest if old else "")
    if key in seen:
        return seen[key]
    result = StepExplanation(node.name, node.step_id, old)
    seen[key] = result
    if old is None:
        return result
    for change in diff_documents(old.identity, node.identity):
        if isinstance(change, FieldChange):
            result.fields.append(change)
            continue
        dep_node = graph.nodes.get(change.new_digest)
        dep_old = versions.by_digest.get(change.old_digest)
        sub = explain_node(graph, dep_node, dep_old, versions, seen) if dep_node and dep_old else None
        result.dependencies.append((change, sub))
    return result


def render_explanation(graph: Graph, e: StepExplanation, indent: str = "",
                       shown: set[int] | None = None) -> list[str]:
    shown = set() if shown is None else shown
    if e.old is None:
        return [f"{indent}{e.name}: no earlier version found"]
    if id(e) in shown:
        return [f"{indent}{e.name}: {e.old.step_id} -> {e.new_id} (explained above)"]
    shown.add(id(e))
    lines = [f"{indent}{e.name}: {e.old.step_id} ({e.old.source}) -> {e.new_id}"]
    for change in e.fields:
        lines.append(f"{indent}    {change.render()}")
    for change, sub in e.dependencies:
        dep = graph.nodes.get(change.new_digest)
        lines.append(f"{indent}    {change.render(dep.name if dep else None)}")
        if sub is None:
            lines.append(f"{indent}        (earlier version {short(change.old_digest)}… of the dependency not "
                         f"found on storage or in the ids file; cannot follow further)")
        else:
            lines += render_explanation(graph, sub, indent + "        ", shown)
    return lines


def root_changes(e: StepExplanation) -> list[tuple[str, list[str]]]:
    """(step name, rendered changes) of every root cause in the tree, each step once."""
    found: dict[str, list[str]] = {}
    for x in e.walk():
        own = [c.render() for c in x.fields]
        own += [f"{c.render()} (earlier version not found)" for c, sub in x.dependencies if sub is None]
        if own and x.name not in found:
            found[x.name] = own
    return list(found.items())


def one_line(graph: Graph, e: StepExplanation) -> str:
    """A single line: what changed against the nearest earlier version, by root cause."""
    if e.old is None:
        return "no earlier version found"
    causes = [("" if name == e.name else f"in {name}: ") + "; ".join(changes) for name, changes in root_changes(e)]
    via = [graph.nodes[c.new_digest].name for c, _ in e.dependencies if c.new_digest in graph.nodes]
    text = f"vs {e.old.step_id}: " + ("; ".join(causes) if causes else "identity differs")
    if via:
        text += f" (through dependency {', '.join(via)})"
    return text


# -- entry points ----------------------------------------------------------------------------------

def run_explain(graph: Graph, name: str, opened: OpenedPrefix | None, main_file: str | None, *, events: Events,
                plan: Plan | None = None, cache_from: Sequence[OpenedPrefix] = ()) -> int:
    """Why each step named `name` has its id: a StepExplained event per step, to `events`. Earlier
    versions are read through `opened`, the prefix as the caller opened it (the one the plan was read
    from: nothing opens it again). With `cache_from` (the cache-from prefixes as that plan opened them,
    and the `plan` a run with them would act on):
    first what that run would do with the step (copy, and from where), and the cache-from prefixes'
    records count as earlier versions too."""
    nodes = graph.node_by_name(name)
    if not nodes:
        names = ", ".join(sorted({n.name for n in graph.nodes.values()}))
        events.error(f"--explain {name!r} matches no step; steps are: {names}")
        return ExitCode.USAGE
    prefix = opened.url if opened is not None else None
    versions = EarlierVersions.gather([n.name for n in graph.nodes.values()], prefix, main_file,
                                      fs=opened.fs if opened is not None else None, cache_from=cache_from)
    for node in nodes:
        lines = [cache_from_line(node, plan, cache_from)] if plan is not None else []
        events.emit(StepExplained(node.name, tuple(lines + explain_lines(graph, node, versions, prefix, main_file))))
    return ExitCode.OK


def explain_lines(graph: Graph, node: StepNode, versions: EarlierVersions, prefix: str | None,
                  main_file: str | None) -> list[str]:
    """Why `node` has its id, as plain lines: unchanged (found where), new, or what changed since its
    nearest earlier version and what a run will check before running it."""
    if node.digest in versions.by_digest:
        found = versions.by_digest[node.digest]
        where = {"storage": "on storage", "ids file": "in the ids file"}.get(found.source, f"under {found.source}")
        lines = [f"{node.name}: id {node.step_id} is unchanged (found {where})"]
        if found.cut_off:
            lines.append(f"{node.name}: not run: {found.cut_off}; its output is an earlier one's")
        return lines
    old = versions.nearest(node)
    if old is None:
        where = f"under {prefix}" if prefix else ""
        ids_file = f" or in {plan_file_path(main_file).name}" if main_file else ""
        return [f"{node.name}: new id {node.step_id}; no earlier version of this step found {where}{ids_file}"]
    explanation = explain_node(graph, node, old, versions)
    lines = list(render_explanation(graph, explanation))
    check = cutoff_check(graph, node, old)
    if check:  # what a run will check before running it (executor.engine.run.cutoff)
        lines.append(f"{node.name}: {check.rstrip('; ')}")
    return [*lines, cascade_summary(len(explanation.readdressed()), explanation.roots())]


def cache_from_plan(graph: Graph, options: Any,
                    environ: Mapping[str, str]) -> tuple[Plan | None, tuple[OpenedPrefix, ...]]:
    """The plan a run with these options (executor.api.Options) would act on, and its cache-from
    prefixes (--cache-from, else EXECUTOR_CACHE_FROM) as that plan opened them, once; (None, ()) when
    there are none: then nothing is read."""
    from executor import api
    from executor.engine.transfers.cache_from import ENV_VAR

    if not options.cache_from and not environ.get(ENV_VAR):
        return None, ()
    decided = api.decide(graph, options, environ=environ)
    return decided.plan, decided.sources


def cache_from_line(node: StepNode, plan: Plan, cache_from: Sequence[OpenedPrefix]) -> str:
    """What a run with --cache-from would do with the step: copy it (from where), or not, and why."""
    decision = plan.decisions.get(node.digest) or plan.standby.get(node.digest)
    if decision is None:
        return f"{node.name}: with --cache-from, not in the plan (not selected)"
    if decision.action == Action.COPY or node.digest in plan.standby:
        return f"{node.name}: with --cache-from, {decision.reason}"
    line = f"{node.name}: with --cache-from, {decision.action}: {decision.reason}"
    if decision.action == Action.RUN:
        from executor.engine.transfers.cache_from import find_sources

        if not find_sources([node], cache_from):
            line += f"; no SUCCESS of {node.step_id} under {', '.join(source.url for source in cache_from)}"
    return line


def dry_run_notes(graph: Graph, plan: Plan, prefix: str, fs: Any, main_file: str | None) -> dict[str, str]:
    """For each step that runs because it is new: one line on what changed (by digest). `fs`: the
    prefix's filesystem, as the plan opened it."""
    new = [d.node for d in plan.decisions.values() if d.action == Action.RUN and d.observed.status is None]
    if not new:
        return {}
    versions = EarlierVersions.gather([n.name for n in graph.nodes.values()], prefix, main_file, fs=fs)
    seen: dict = {}
    notes = {}
    for node in new:
        old = versions.nearest(node)
        if old is not None:
            notes[node.digest] = cutoff_check(graph, node, old) + one_line(
                graph, explain_node(graph, node, old, versions, seen))
    return notes


def cutoff_check(graph: Graph, node: StepNode, old: Version) -> str:
    """What the run will check before running a step whose earlier version differs only in dependency
    digests (executor.engine.run.cutoff): "runs unless cut/write's output is unchanged; " (else "")."""
    changes = diff_documents(old.identity, node.identity)
    if not changes or not all(isinstance(c, DependencyChange) and c.new_digest in node.deps for c in changes):
        return ""
    names = " and ".join(f"{graph.nodes[d].name}'s" for d in dict.fromkeys(c.new_digest for c in changes))
    plural = "outputs are" if len({c.new_digest for c in changes}) > 1 else "output is"
    return f"runs unless {names} {plural} unchanged (then cut off); "


def note_changes(graph: Graph, plan: Plan, prefix: str, fs: Any, main_file: str | None, events: Events) -> None:
    """The "what changed" notes of a plan: a ChangeNoted event per new id with an earlier version, read
    through `fs`, the prefix's filesystem as the plan opened it."""
    try:
        notes = dry_run_notes(graph, plan, prefix, fs, main_file)
    except Exception as e:  # noqa: BLE001 - a hint must never break the dry run
        events.warning(f"could not compare with earlier versions: {type(e).__name__}: {e}")
        return
    for digest, note in notes.items():
        events.emit(ChangeNoted(graph.nodes[digest].name, note))


__all__ = ["EarlierVersions", "StepExplanation", "Version", "cache_from_line", "cache_from_plan", "dry_run_notes",
           "explain_lines", "explain_node", "note_changes", "run_explain"]
