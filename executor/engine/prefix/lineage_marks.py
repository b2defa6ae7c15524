"""Lineage markers: empty objects a commit leaves under `<prefix>/lineage/` so that `lineage --down`
finds what consumed an output by listing, not by reading every status and record.

When a step's output is committed (a run, an early cutoff, a cache copy), after its SUCCESS status is
written, the commit creates `lineage/outputs/<rel>,<generation>,<digest>` and, for each output it was
made from (a dependency's digest, the output an adoption names, a tag's digest), one
`lineage/consumers/<that digest>/<rel>,<generation>,<digest>,<how>` (each part percent-quoted, so a
`,` or `/` in it cannot split it). The generation is the committed status's: a marker speaks for its
output only while the status listing shows that same generation, so a re-run, a re-written status
or a deleted output (gc) makes its markers ignored, never wrong. A marker that could not be written
leaves the output to the edges index (executor/tools/lineage_index.py), which reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import quote, unquote

OUTPUTS_DIR = "lineage/outputs/"
CONSUMERS_DIR = "lineage/consumers/"


@dataclass(frozen=True)
class Mark:
    """An output as a marker names it: its rel, its status's generation and digest; `how` it relates
    to the digest whose folder holds it (consumers/ markers only)."""

    rel: str
    generation: str
    digest: str
    how: str = ""


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


def mark_committed(store: Any, events: Any, rel: str, status: Any, generation: str,
                   record: dict[str, Any]) -> None:
    """Leave the markers of an output just committed at `generation`. A failure is a warning: the
    markers are an index, the edges index reads an output that has none."""
    if ((record.get("extra") or {}).get("legacy_digest")) or not status.digest:
        return  # consumers may name its digest of before: the edges index handles it
    name = ",".join(quote(part, safe="") for part in (rel, generation, status.digest))
    try:
        # an alias (early cutoff) is made from the output it names, as the edges index reads it
        for digest, how in made_from(status, None if status.alias_of else record):
            store.create_if_absent(f"{CONSUMERS_DIR}{quote(digest, safe='')}/{name},{quote(how, safe='')}", b"")
        store.create_if_absent(f"{OUTPUTS_DIR}{name}", b"")  # last: it says the consumers/ ones are all there
    except Exception as e:  # noqa: BLE001 - the step is committed; lineage reads its record instead
        events.warning(f"{rel}: could not write its lineage markers ({type(e).__name__}: {e}); "
                       "`stepgraph lineage --down` will read its status and record instead")


def parse(key: str, folder: str) -> Mark | None:
    """The Mark a listed key under `folder` names; None for anything else."""
    parts = key[len(folder):].rsplit("/", 1)[-1].split(",") if key.startswith(folder) else []
    if len(parts) not in (3, 4):
        return None
    return Mark(*(unquote(p) for p in parts))


def outputs(store: Any) -> dict[str, Mark]:
    """rel -> Mark of every output that left its markers, from one listing."""
    listed = (parse(key, OUTPUTS_DIR) for key in store.list_generations(OUTPUTS_DIR, ""))
    return {m.rel: m for m in listed if m is not None and not m.how}


def consumers(store: Any, digest: str) -> list[Mark]:
    """What left a marker naming `digest` (one listing)."""
    folder = f"{CONSUMERS_DIR}{quote(digest, safe='')}/"
    listed = (parse(key, folder) for key in sorted(store.list_generations(folder, "")))
    return [m for m in listed if m is not None and m.how]


def all_consumers(store: Any) -> dict[str, list[Mark]]:
    """digest -> what left a marker naming it, for every digest (one listing of `lineage/consumers/`)."""
    found: dict[str, list[Mark]] = {}
    for key in sorted(store.list_generations(CONSUMERS_DIR, "")):
        folder = key[: key.find("/", len(CONSUMERS_DIR)) + 1]
        mark = parse(key, folder) if folder.startswith(CONSUMERS_DIR) and folder != CONSUMERS_DIR else None
        if mark is not None and mark.how:
            found.setdefault(unquote(folder[len(CONSUMERS_DIR):-1]), []).append(mark)
    return found


__all__ = ["CONSUMERS_DIR", "OUTPUTS_DIR", "Mark", "all_consumers", "consumers", "made_from", "mark_committed",
           "outputs", "parse", "tags_read"]
