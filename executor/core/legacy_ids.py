"""LEGACY: step ids as they were made before issue 44, kept only to carry old outputs over.

Until issue 44 the identity document named each config class (dataclass, enum, namedtuple, and a
registered type without an explicit name) by its module as well (`experiments.hello.WordsConfig`,
naming.py). Ids now name a class by its `__qualname__` alone (canonical.py), so every step whose
config holds such a class has a new id. `LegacyEncoder` is the encoder with the old names, nothing
else changed (the identity schema is the same: a config without such classes keeps its id), and
`LegacyDigests` works out a graph's old digests, each from its dependencies' old digests (the Merkle
tree as it was). Used by executor/engine/run/legacy_carry.py, which adopts the old outputs under the new
ids, executor/engine/transfers/cache_from.py (a --cache-from prefix written before) and executor/tools/taint.py (a
taint recorded against an old digest); nothing else may use it. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Callable

from executor.core import encodings
from executor.core.canonical import CanonicalEncoder
from executor.core.graph import Graph
from executor.core.identity import identity_and_digest, step_id
from executor.core.naming import qualified_name
from executor.core.step import OutputPathOf


class LegacyEncoder(CanonicalEncoder):
    """The canonical encoder naming classes by module and qualname, as ids did before issue 44."""

    type_name = staticmethod(qualified_name)
    dataclass_encoders: dict[type, Callable[[Any, Callable[[Any], str]], str]] = {}

    @staticmethod
    def registered_name(entry: encodings.Encoding) -> str:
        return entry.legacy_name or entry.name


encodings.on_change(LegacyEncoder.dataclass_encoders.clear)


class LegacyDigests:
    """The pre-issue-44 digest of each step of `graph`, worked out when asked for (a step's old
    digest needs its dependencies' old digests: those are worked out first, once)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._digests: dict[str, str] = {}  # new digest -> old digest
        self._encoder = LegacyEncoder(self._dependency, tag_of=self._tag)

    def _dependency(self, placeholder: OutputPathOf) -> str:
        return self._digests[self.graph.digest_by_object[id(placeholder.step)]]

    def _tag(self, placeholder: Any) -> str | None:
        """An output_of_tag(...) as the graph resolved it (tags came after issue 44: no old id reads one)."""
        tags = next(iter(self.graph.nodes.values())).tags if self.graph.nodes else {}
        entry = tags.get(placeholder.tag)
        return entry.digest if entry is not None else None

    def of(self, digest: str) -> str:
        """The old digest of the step whose (new) digest is `digest`."""
        nodes = self.graph.nodes
        stack = [digest]
        while stack:  # dependencies first, without recursion (chains may be thousands deep)
            top = stack[-1]
            if top in self._digests:
                stack.pop()
                continue
            node = nodes[top]
            waiting = [d for d in (*node.deps, *node.weak_deps) if d not in self._digests]
            if waiting:
                stack.extend(waiting)
                continue
            self._digests[top] = identity_and_digest(node.step, self._encoder)[1]
            stack.pop()
        return self._digests[digest]

    def step_id(self, digest: str) -> str:
        return step_id(self.graph.nodes[digest].name, self.of(digest))

    def new_digest_of(self) -> dict[str, str]:
        """Old digest -> new digest, for the steps worked out so far."""
        return {old: new for new, old in self._digests.items()}
