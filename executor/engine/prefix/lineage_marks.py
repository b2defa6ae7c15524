"""Lineage markers: empty objects a commit leaves under `<prefix>/lineage/` so that `lineage --down`
finds what consumed an output by listing, not by reading every status and record.

When a step's output is committed (a run, an early cutoff, a cache copy), after its SUCCESS status is
written, the commit leaves, for each output it was made from (a dependency's digest, the output an
adoption names, a tag's digest), one `lineage/consumers/<that digest>/<rel>,<generation>,<digest>,<how>,<n>`
where n is how many such markers the commit leaves; an output made from nothing leaves one
`lineage/outputs/<rel>,<generation>,<digest>` instead. Each part is percent-quoted, so a `,` or `/` in
it cannot split it. So a commit costs max(1, dependencies) small writes, all at once (the run's
executor/engine/run/mark_writer.py), and one listing of `lineage/` finds them all. The generation is
the committed status's: the markers speak for their output only while the status listing shows that
same generation and all n of them are there, so a re-run, a re-written status, a deleted output (gc)
or a marker write that failed makes them ignored, never wrong; the edges index
(executor/tools/lineage_index.py) then reads that output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote

LINEAGE_DIR = "lineage/"
OUTPUTS_DIR = f"{LINEAGE_DIR}outputs/"
CONSUMERS_DIR = f"{LINEAGE_DIR}consumers/"


@dataclass(frozen=True)
class Mark:
    """An output as a marker names it: its rel, its status's generation and digest; `how` it relates
    to the digest whose folder holds it and the `count` of consumers/ markers its commit left
    (consumers/ markers only)."""

    rel: str
    generation: str
    digest: str
    how: str = ""
    count: int = 0


@dataclass
class Marked:
    """What one listing of `lineage/` found: outputs made from nothing (rel -> Mark), and the
    consumers/ markers by the digest whose folder holds them."""

    outputs: dict[str, Mark]
    consumers: dict[str, list[Mark]]

    def valid(self, statuses: Mapping[str, str]) -> dict[str, Mark]:
        """rel -> Mark of each output whose markers speak for it: every one its commit left is
        there, at the generation `statuses` (rel -> generation, the status listing) shows."""
        found = {rel: m for rel, m in self.outputs.items() if statuses.get(rel) == m.generation}
        seen: dict[tuple[str, str], set[tuple[str, str]]] = {}
        first: dict[tuple[str, str], Mark] = {}
        for digest, marks in self.consumers.items():
            for m in marks:
                if statuses.get(m.rel) == m.generation:
                    seen.setdefault((m.rel, m.generation), set()).add((digest, m.how))
                    first.setdefault((m.rel, m.generation), m)
        found.update({rel: first[rel, g] for (rel, g), made in seen.items() if len(made) == first[rel, g].count})
        return found


def made_from(status: Any, record: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(digest, how) of each output `status`/`record` were made from: `adopted as` an alias,
    `consumed by` a dependency, `reads tag NAME@VERSION` for a tag its identity read."""
    found = []
    if status.alias_of:
        found.append((status.alias_of["digest"], "adopted as"))
    for dep in (record or {}).get("dependencies") or []:
        if isinstance(dep, dict) and isinstance(dep.get("digest"), str):
            found.append((dep["digest"], "consumed by"))
    found.extend((digest, f"reads tag {tag}") for tag, digest in tags_read((record or {}).get("identity")))
    return found


def tags_read(value: Any) -> Iterator[tuple[str, str]]:
    """(tag, digest) of each output_of_tag(...) in an identity document."""
    if isinstance(value, dict):
        if isinstance(value.get("tag"), str) and isinstance(value.get("digest"), str):
            yield value["tag"], value["digest"]
            return
        for v in value.values():
            yield from tags_read(v)
    elif isinstance(value, list):
        for v in value:
            yield from tags_read(v)


def marker_keys(rel: str, status: Any, generation: str, record: dict[str, Any]) -> list[str] | None:
    """The keys of the markers an output committed at `generation` leaves (see the module's docstring).
    None: it leaves none (an output carried over under a digest of before, or without a digest: the
    edges index reads it)."""
    if ((record.get("extra") or {}).get("legacy_digest")) or not status.digest:
        return None
    name = ",".join(quote(part, safe="") for part in (rel, generation, status.digest))
    # an alias (early cutoff) is made from the output it names, as the edges index reads it
    made = sorted(set(made_from(status, None if status.alias_of else record)))
    if not made:
        return [f"{OUTPUTS_DIR}{name}"]
    return [f"{CONSUMERS_DIR}{quote(digest, safe='')}/{name},{quote(how, safe='')},{len(made)}" for digest, how in made]


def parse(key: str, folder: str) -> Mark | None:
    """The Mark a listed key under `folder` names; None for anything else."""
    parts = key[len(folder):].rsplit("/", 1)[-1].split(",") if key.startswith(folder) else []
    if folder == OUTPUTS_DIR and len(parts) == 3:
        return Mark(*(unquote(p) for p in parts))
    if folder.startswith(CONSUMERS_DIR) and len(parts) == 5 and parts[4].isdigit():
        return Mark(*(unquote(p) for p in parts[:4]), count=int(parts[4]))
    return None


def listed(store: Any) -> Marked:
    """Every marker under the prefix, from one listing of `lineage/`."""
    marked = Marked({}, {})
    for key in sorted(store.list_generations(LINEAGE_DIR, "")):
        if key.startswith(OUTPUTS_DIR):
            mark = parse(key, OUTPUTS_DIR)
            if mark is not None:
                marked.outputs[mark.rel] = mark
        elif key.startswith(CONSUMERS_DIR) and "/" in key[len(CONSUMERS_DIR):]:
            mark = parse(key, CONSUMERS_DIR)
            if mark is not None:
                digest = unquote(key[len(CONSUMERS_DIR):].split("/", 1)[0])
                marked.consumers.setdefault(digest, []).append(mark)
    return marked


def stale(marker_keys_listed: Iterable[str], statuses: Mapping[str, str]) -> list[str]:
    """The marker keys (as listed under `lineage/`) that no longer speak for an output: `statuses`
    (rel -> generation, a status listing made after the markers were listed) does not hold the
    generation they name (the output was deleted, re-run or its status re-written). A marker is
    written after its status, so one listed before the statuses names a status the listing shows
    unless that status changed since: deleting it never loses a marker that counts."""
    found = []
    for key in marker_keys_listed:
        folder = next((f for f in (OUTPUTS_DIR, CONSUMERS_DIR) if key.startswith(f)), None)
        mark = parse(key, folder) if folder else None
        if mark is not None and statuses.get(mark.rel) != mark.generation:
            found.append(key)
    return found


__all__ = ["CONSUMERS_DIR", "LINEAGE_DIR", "OUTPUTS_DIR", "Mark", "Marked", "listed", "made_from", "marker_keys",
           "parse", "stale", "tags_read"]
