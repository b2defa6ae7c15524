"""Lineage: what an output was made from (up, to the raw inputs) and what has used it since (down),
from the stored statuses and records alone — no experiment file needed.

Up follows each record's dependencies, an adoption (`alias_of`) to the output it names, a
`--cache-from` copy to its source prefix (when that prefix can be opened; else the copy's own
record stands), and a tag a config read (`{"tag", "digest"}` in the identity document) to the output
the tag pointed at. Down walks the consumers of each digest, adopted ids included, from the markers
each commit leaves (executor/engine/prefix/lineage_marks.py: two listings) and, for outputs without
them, from the edges index kept under the prefix (executor/tools/lineage_index.py: one read once the
index is up to date; a status and a record read per output changed since). Every call counts its
listings and reads in `Lineage.cost`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from executor.core.errors import ExecutorError, StatusError
from executor.core.record import State, parse_record, parse_status, record_key, status_key
from executor.engine.prefix import lineage_marks
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.prefix.lineage_marks import tags_read


@dataclass(frozen=True)
class LineageNode:
    """One output met on the walk; `via` says how it was reached from `parent` (dependency, adopted
    from, copied from, tag NAME@VERSION, consumed by)."""

    prefix: str
    rel: str
    digest: str | None
    state: str
    depth: int
    via: str | None = None
    parent: str | None = None  # the path of the output it was reached from

    @property
    def path(self) -> str:
        return f"{self.prefix}/{self.rel}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "prefix": self.prefix, "step_id": self.rel, "digest": self.digest,
                "state": self.state, "depth": self.depth, "via": self.via, "parent": self.parent}


@dataclass
class Lineage:
    nodes: list[LineageNode] = field(default_factory=list)
    cost: dict[str, int] = field(default_factory=lambda: {"listings": 0, "reads": 0})


class _Prefixes:
    """The views of the prefixes a walk reaches, opened once each (a copy's source may be unreadable)."""

    def __init__(self, first: PrefixView, storage: Any, cost: dict[str, int]):
        self.views: dict[str, PrefixView | None] = {first.prefix: first}
        self.storage, self.cost = storage, cost

    def view(self, prefix: str) -> PrefixView | None:
        if prefix not in self.views:
            try:
                self.views[prefix] = PrefixView.open(prefix, self.storage)
            except Exception:  # noqa: BLE001 - an unreachable source ends the walk there, it is not an error
                self.views[prefix] = None
        return self.views[prefix]

    def read_json(self, view: PrefixView, key: str, parse: Callable) -> Any:
        self.cost["reads"] += 1
        try:
            read = view.store.read(key)
            return parse(read.data, view.path_of(key)) if read is not None else None
        except (StatusError, OSError, ValueError):
            return None


def lineage_up(view: PrefixView, rel: str, storage: Any = None) -> Lineage:
    """The output at `rel` and everything it was made from, depth first, each output once."""
    result = Lineage()
    prefixes = _Prefixes(view, storage, result.cost)
    seen: set[str] = set()
    stack: list[tuple[PrefixView, str, int, str | None, str | None]] = [(view, rel, 0, None, None)]
    while stack:
        here, at, depth, via, parent = stack.pop()
        if f"{here.prefix}/{at}" in seen:
            continue
        seen.add(f"{here.prefix}/{at}")
        status = prefixes.read_json(here, status_key(at), parse_status)
        node = LineageNode(here.prefix, at, status.digest if status else None,
                           status.state.value if status else "absent", depth, via, parent)
        result.nodes.append(node)
        if status is None:
            continue
        nexts = list(_made_from(prefixes, here, at, status))
        stack.extend((v, r, depth + 1, how, node.path) for v, r, how in reversed(nexts))
    return result


def _made_from(prefixes: _Prefixes, here: PrefixView, at: str, status: Any) -> Iterator[tuple[PrefixView, str, str]]:
    if status.alias_of:  # adopted: the output is the one it names
        yield here, status.alias_of["output_rel"], "adopted from"
        return
    if status.copied_from:
        source = prefixes.view(status.copied_from)
        if source is not None and source.store.read(status_key(at)) is not None:
            prefixes.cost["reads"] += 1
            yield source, at, "copied from"
            return
    record = prefixes.read_json(here, record_key(at), parse_record) or {}
    for dep in record.get("dependencies") or []:
        yield here, _dependency_rel(here, dep), "dependency"
    for tag, digest in tags_read(record.get("identity")):
        from executor.tools.tags import tag_history

        prefixes.cost["reads"] += 1
        entries = [e for e in tag_history(here.store, tag) if e.digest == digest]
        if entries:
            yield here, entries[-1].step_id, f"tag {tag}"


def _dependency_rel(here: PrefixView, dep: dict[str, Any]) -> str:
    """Where to find a record's dependency under the prefix: its step id (through an alias, if adopted), or
    the path it was read at when that is an override_output_path under this prefix (not NAME-<hash>)."""
    path, root = str(dep.get("path") or ""), here.prefix.rstrip("/") + "/"
    rel = path[len(root):].rstrip("/") if path.startswith(root) else ""
    if rel and not re.fullmatch(rf"{re.escape(str(dep.get('name')))}-[0-9a-f]{{12}}", rel):
        return rel
    return dep.get("step_id")


def lineage_down(view: PrefixView, rel: str) -> Lineage:
    """The output at `rel` and every output under the prefix made from it, directly or not (adopted
    ids of it included). Outputs whose commit left its lineage markers (executor/engine/prefix/lineage_marks.py)
    cost nothing to read: one listing of the statuses and one of `lineage/`. The others (committed
    before markers existed, failed, running, carried over, or a marker write failed) come from the edges
    index (executor/tools/lineage_index.py): one read, plus a status and a record read for each of them
    changed since the index was written."""
    from executor.tools.lineage_index import entries

    result = Lineage()
    listed = view.list_steps()
    marked = lineage_marks.listed(view.store)
    result.cost["listings"] += 2
    valid = marked.valid(listed)  # every marker its commit left is there, its status unchanged since
    rest = {r: g for r, g in listed.items() if r not in valid}
    index = entries(view, result.cost, rest) if rest else {}
    if rel not in valid and rel not in index:
        raise ExecutorError(f"no output {rel!r} under {view.prefix}")
    consumers: dict[str, list[tuple[str, str]]] = {}  # digest -> (rel, how) of what consumed it
    for at, entry in index.items():
        for digest, how in entry.made_from:
            consumers.setdefault(digest, []).append((at, how))
    for digest, marks in marked.consumers.items():
        for m in marks:
            if m.rel in valid and valid[m.rel].generation == m.generation:
                consumers.setdefault(digest, []).append((m.rel, m.how))

    seen: set[str] = set()
    stack: list[tuple[str, int, str | None, str | None]] = [(rel, 0, None, None)]
    while stack:
        at, depth, via, parent = stack.pop()
        if at in seen:
            continue
        seen.add(at)
        entry = index.get(at)
        digest, state, legacy = ((entry.digest, entry.state, entry.legacy_digest) if entry is not None
                                 else (valid[at].digest, State.SUCCESS.value, None))
        node = LineageNode(view.prefix, at, digest, state, depth, via, parent)
        result.nodes.append(node)
        found = [*consumers.get(digest, []), *(consumers.get(legacy, []) if legacy else [])]
        stack.extend((r, depth + 1, how, node.path) for r, how in reversed(found))
    return result
