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
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote

LINEAGE_DIR = "lineage/"
OUTPUTS_DIR = f"{LINEAGE_DIR}outputs/"
CONSUMERS_DIR = f"{LINEAGE_DIR}consumers/"


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


def marker_keys(rel: str, status: Any, generation: str, record: dict[str, Any]) -> tuple[list[str], str] | None:
    """The keys of the markers an output committed at `generation` leaves: its consumers/ markers, and
    its outputs/ marker, to be written once those are all there (it vouches for them). None: it leaves
    none (an output carried over under a digest of before, or without a digest: the edges index reads it)."""
    if ((record.get("extra") or {}).get("legacy_digest")) or not status.digest:
        return None
    name = ",".join(quote(part, safe="") for part in (rel, generation, status.digest))
    # an alias (early cutoff) is made from the output it names, as the edges index reads it
    made = made_from(status, None if status.alias_of else record)
    return ([f"{CONSUMERS_DIR}{quote(digest, safe='')}/{name},{quote(how, safe='')}" for digest, how in made],
            f"{OUTPUTS_DIR}{name}")


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


__all__ = ["CONSUMERS_DIR", "LINEAGE_DIR", "OUTPUTS_DIR", "Mark", "all_consumers", "consumers", "made_from", "marker_keys",
           "outputs", "parse", "stale", "tags_read"]
