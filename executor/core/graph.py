"""The step graph: discovery through configs, identities, de-duplication and topological order.

Two declarations with the same digest are one node. Two different digests on one output path,
a cycle, or an unsafe name is a GraphError naming the steps involved.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from executor.core.errors import GraphError
from executor.core.frozen import new_frozen
from executor.core.gc_pause import gc_paused
from executor.core.canonical import CanonicalEncoder
from executor.core.identity import identity_and_digest, step_id
from executor.core.step import ExecutorStep, OutputPathOf, TaggedOutput, validate_name


@dataclass(frozen=True)
class StepNode:
    """A step with its identity worked out."""

    step: ExecutorStep
    digest: str
    step_id: str
    output_rel: str  # output directory relative to the prefix
    deps: tuple[str, ...]  # digests of blocking dependencies
    weak_deps: tuple[str, ...]  # digests of .nonblocking() dependencies: hashed, not awaited
    # id(step object) -> digest for the whole graph (Graph.digest_by_object, shared): what the
    # identity document names this step's dependencies by
    digests: dict[int, str] = field(repr=False, compare=False)
    mirrored: tuple[str, ...] = ()  # logical URLs of the mirrored(...) inputs its config holds, found while hashing
    tagged: tuple[str, ...] = ()  # the tags (name@version) its config reads through output_of_tag(...)
    # tag -> what it pointed at when the graph was built (executor.tools.tags.TagEntry: digest, output_rel),
    # for the whole graph (shared)
    tags: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def identity_bytes(self) -> bytes:
        """The canonical identity document that was hashed, encoded again when asked for: kept, it
        would be 1-2 KB per step that planning never reads (10,000 steps: 13 MB of fresh pages).
        A config changed since its step was hashed is a GraphError, never a document that does not
        match the id."""
        encoder = CanonicalEncoder(self._dependency_digest, tag_of=self._tag_digest)
        data, digest = identity_and_digest(self.step, encoder)
        if digest != self.digest:
            raise GraphError(f"step {self.name!r}: its config changed after its id ({self.step_id}) was computed; "
                             f"configs must not be modified once steps are declared (build a new config "
                             f"with dataclasses.replace instead)")
        return data

    def _dependency_digest(self, placeholder: OutputPathOf) -> str:
        return self.digests[id(placeholder.step)]

    def _tag_digest(self, placeholder: TaggedOutput) -> str | None:
        entry = self.tags.get(placeholder.tag)
        return entry.digest if entry is not None else None

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """The identity document, parsed on demand: 10,000 nodes cost the garbage collector one
        object each instead of a tree of dicts each."""
        return json.loads(self.identity_bytes)


@dataclass(frozen=True)
class Graph:
    nodes: dict[str, StepNode]  # by digest, in topological order (dependencies first)
    targets: tuple[str, ...]  # digests of the steps the user asked for
    digest_by_object: dict[int, str]  # id(step object) -> digest, duplicates declarations included

    def digest_of(self, step: ExecutorStep) -> str:
        return self.digest_by_object[id(step)]

    def node_by_name(self, name: str) -> list[StepNode]:
        return [n for n in self.nodes.values() if n.name == name or n.step_id == name]

    def dependents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {d: [] for d in self.nodes}
        for node in self.nodes.values():
            for dep in node.deps:
                out[dep].append(node.digest)
        return out

    def closure(self, digests: Iterable[str]) -> set[str]:
        """The given steps plus everything they (blockingly) need: one pass over the nodes from the
        last (dependents before their dependencies, as `nodes` is topological), in the order they
        lie in memory rather than a walk in hash order (100,000 targets: 230 -> 60 ms)."""
        seen = set(digests)
        for digest, node in reversed(self.nodes.items()):
            if digest in seen:
                seen.update(node.deps)
        return seen


class _DigestFirst(Exception):
    """Dependencies nest too deeply to recurse further: digest `step` from the top first. `path`
    is the walk that reached it (kept to name a cycle through it in full)."""

    def __init__(self, step: ExecutorStep, path: list[ExecutorStep]):
        super().__init__()
        self.step, self.path = step, path


# Dependencies are digested recursively from inside the encoder; past this many nested steps the
# walk sets the outer steps aside and starts again from the deepest one, so a chain of 10,000
# steps stays well within Python's recursion limit.
MAX_NESTED_STEPS = 32


TagLookup = Callable[[str], Any]  # 'name@version' -> what it points at (.digest, .output_rel), None if no such tag


def build_graph(steps: Iterable[ExecutorStep], tags: TagLookup | None = None) -> Graph:
    """Walk configs from the given steps, hash every step once, order dependencies first. `tags`
    resolves output_of_tag(...) placeholders (read from the prefix: executor.tools.tags.tag_lookup);
    without it a step reading a tag cannot be hashed (a ConfigEncodingError naming step, field and tag)."""
    with gc_paused():
        return _build_graph(steps, tags)


def _build_graph(steps: Iterable[ExecutorStep], tags: TagLookup | None = None) -> Graph:
    builder = _GraphBuilder(tags)
    targets = tuple(dict.fromkeys(builder.visit_from_top(s) for s in steps))
    _check_output_paths(builder.nodes.values())
    return Graph(builder.nodes, targets, builder.digests)


class _GraphBuilder:
    """One walk over the configs that both discovers the steps and hashes each once (the encoder
    calls back for every dependency placeholder it meets)."""

    def __init__(self, tags: TagLookup | None = None) -> None:
        self.tag_lookup = tags
        self.tags: dict[str, Any] = {}  # tag -> what it points at, for the tags met so far
        self.digests: dict[int, str] = {}  # id(step object) -> digest
        self.nodes: dict[str, StepNode] = {}
        self.in_progress: list[ExecutorStep] = []  # the current path, for naming a cycle
        self.on_path: set[int] = set()
        # id(step object) -> why digesting it failed. An encoder that retries a container field by field
        # (to name the failing field) asks for the same dependency again: it gets the error at once, so
        # a failure deep in a chain costs one walk, not one per level above it (2**depth).
        self.failed: dict[int, Exception] = {}
        self.waiting: list[list[ExecutorStep]] = []  # walks set aside until a deep dependency is digested from the top
        # (blocking deps, weak deps, mirrored inputs) of each step in in_progress
        self.collecting: list[tuple[dict[str, None], dict[str, None], dict[str, None]]] = []
        self.encoder = CanonicalEncoder(self.dependency_digest, self.note_mirrored,  # shared sub-configs: once
                                        self.tag_digest if tags is not None else None)
        self.tagged: list[dict[str, None]] = []  # the tags each step in in_progress reads

    def dependency_digest(self, placeholder: OutputPathOf) -> str:
        digest = self.digests.get(id(placeholder.step)) or self.visit(placeholder.step)
        deps, weak, _ = self.collecting[-1]
        (deps if placeholder.blocking else weak)[digest] = None
        return digest

    def tag_digest(self, placeholder: TaggedOutput) -> str | None:
        if placeholder.tag not in self.tags:
            self.tags[placeholder.tag] = self.tag_lookup(placeholder.tag)  # type: ignore[misc]
        entry = self.tags[placeholder.tag]
        if entry is None:
            return None
        self.tagged[-1][placeholder.tag] = None
        return entry.digest

    def note_mirrored(self, placeholder: Any) -> None:
        self.collecting[-1][2][placeholder.url] = None

    def visit(self, step: ExecutorStep) -> str:
        key = id(step)
        known = self.digests.get(key)  # only steps are ever stored: anything else goes on to the check below
        if known is not None:
            return known
        if not isinstance(step, ExecutorStep):
            raise GraphError(f"expected an ExecutorStep, got {type(step).__name__}: {step!r}")
        _check_name(step)
        if key in self.failed:
            raise self.failed[key]
        if key in self.on_path:
            chain = [s for path in self.waiting for s in path] + self.in_progress
            cycle = chain[[s is step for s in chain].index(True):] + [step]
            raise GraphError("dependency cycle: " + " -> ".join(s.name for s in cycle))
        if len(self.in_progress) >= MAX_NESTED_STEPS:
            raise _DigestFirst(step, list(self.in_progress))
        self.in_progress.append(step)
        self.on_path.add(key)
        deps: dict[str, None] = {}
        weak: dict[str, None] = {}
        mirrored: dict[str, None] = {}
        self.collecting.append((deps, weak, mirrored))
        tagged: dict[str, None] = {}
        self.tagged.append(tagged)
        try:
            digest = identity_and_digest(step, self.encoder)[1]
        except _DigestFirst:  # not a failure: the step is digested again once the deeper one is
            raise
        except Exception as e:
            self.failed[key] = e
            raise
        finally:
            self.collecting.pop()
            self.tagged.pop()
            self.in_progress.pop()
            self.on_path.discard(key)
        self.digests[key] = digest
        if digest not in self.nodes:
            self._add_node(step, digest, deps, weak, mirrored, tagged)
        return digest

    def _add_node(self, step: ExecutorStep, digest: str, deps: dict[str, None], weak: dict[str, None],
                  mirrored: dict[str, None], tagged: dict[str, None]) -> None:
        _check_override(step)
        sid = step_id(step.name, digest)
        self.nodes[digest] = new_frozen(StepNode, {
            "step": step, "digest": digest, "step_id": sid, "output_rel": step.override_output_path or sid,
            "deps": tuple(deps), "weak_deps": tuple(d for d in weak if d not in deps) if weak else (),
            "digests": self.digests, "mirrored": tuple(mirrored), "tagged": tuple(tagged), "tags": self.tags})

    def visit_from_top(self, step: ExecutorStep) -> str:
        """visit(), setting steps aside while a dependency too deep to recurse into is digested."""
        stack = [step]
        while True:
            try:
                digest = self.visit(stack[-1])
            except _DigestFirst as deeper:
                self.waiting.append(deeper.path)  # it starts with stack[-1]
                self.on_path.add(id(stack[-1]))
                stack.append(deeper.step)
                continue
            stack.pop()
            if not stack:
                return digest
            self.on_path.discard(id(self.waiting.pop()[0]))


def _check_name(step: ExecutorStep) -> None:
    """A step's name becomes its folder under the prefix: an unsafe one is a GraphError (exit 2)."""
    try:
        validate_name(step.name)
    except ValueError as e:
        raise GraphError(str(e)) from None


def _check_override(step: ExecutorStep) -> None:
    override = step.override_output_path
    if override is None:
        return
    if isinstance(override, str) and (override.startswith("/") or "://" in override):
        raise GraphError(
            f"step {step.name!r}: override_output_path {override!r} is absolute; it must be relative to the "
            f"prefix (e.g. 'checkpoints/my-run'), since leases and records live under --prefix. To read an "
            f"existing output elsewhere, give its full path as a plain string to the step that reads it.")
    try:
        validate_name(override, f"step {step.name!r}: override_output_path")
    except ValueError as e:
        raise GraphError(str(e)) from None


def _check_output_paths(nodes: Iterable[StepNode]) -> None:
    owner: dict[str, StepNode] = {}
    for node in nodes:
        other = owner.setdefault(node.output_rel, node)
        if other is not node:
            raise GraphError(
                f"steps {other.name!r} ({other.digest[:16]}…) and {node.name!r} ({node.digest[:16]}…) "
                f"differ but both write to {node.output_rel!r}; give one a different name or "
                f"override_output_path")
    # An output nested inside another step's directory would be swept into its manifest.
    paths = sorted(owner)
    for a, b in zip(paths, paths[1:]):
        if b.startswith(a + "/"):
            raise GraphError(f"step output {b!r} ({owner[b].name!r}) lies inside {a!r} ({owner[a].name!r}); "
                             f"outputs may not nest")
