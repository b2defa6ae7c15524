"""Tags: a name people can say (`tokenized/fineweb@2026.12`) pointing at one completed output's digest.

A tag is `<prefix>/tags/<name>/<version>.json`: a schema-versioned JSON object whose `entries` list
is the tag's history, the last entry being where it points now. It is created with the store's
`create_if_absent`, so of two people tagging one version at once exactly one wins and the other is
told who did; a version once taken moves only with `force` and a reason, by a compare-and-swap
(`replace_if_generation`) that appends an entry, so the history is never lost. Experiments read
tags through `output_of_tag(...)`: at planning the tag resolves to its digest (part of the
reader's id) and, when the step runs, to the tagged output's path.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from executor.core.errors import ExecutorError, StatusError
from executor.core.record import State, parse_status, status_key
from executor.core.step import split_tag

TAG_SCHEMA = 1
TAGS_DIR = "tags/"
_MOVE_TRIES = 5  # CAS retries when another writer appended to the same tag meanwhile


class TagTaken(ExecutorError):
    """The tag's version already points at an output; moving it needs force and a reason."""


@dataclass(frozen=True)
class TagEntry:
    """One entry of a tag's history: what `tag` pointed at from `at` on, and who said so."""

    tag: str
    step_id: str
    digest: str
    output_rel: str  # where the output's files are, under the prefix (an adopted output: its original)
    by: Mapping[str, Any] = field(default_factory=dict)  # user, host
    at: float = 0.0
    reason: str | None = None  # a move's reason (required with force)
    moved_from: str | None = None  # a move: the digest it pointed at before

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "by": dict(self.by)}


def tag_key(tag: str) -> str:
    name, version = split_tag(tag)
    return f"{TAGS_DIR}{name}/{version}.json"


def _parse(data: bytes, where: str) -> list[TagEntry]:
    try:
        raw = json.loads(data)
        schema = raw["schema"]
        if schema > TAG_SCHEMA:
            raise StatusError(f"{where}: tag schema {schema} is newer than this executor understands "
                              f"({TAG_SCHEMA}); upgrade stepgraph. The file was left untouched.")
        return [TagEntry(**e) for e in raw["entries"]]
    except StatusError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise StatusError(f"{where}: corrupt tag file ({type(e).__name__}: {e})") from None


def _dump(tag: str, entries: list[TagEntry]) -> bytes:
    return json.dumps({"schema": TAG_SCHEMA, "tag": tag, "entries": [e.to_json() for e in entries]},
                      indent=1, sort_keys=True).encode()


def tag_history(store: Any, tag: str) -> list[TagEntry]:
    """Every entry of the tag, oldest first (empty when there is no such tag)."""
    read = store.read(tag_key(tag))
    return _parse(read.data, f"{store.root}/{tag_key(tag)}") if read is not None else []


def read_tag(store: Any, tag: str) -> TagEntry | None:
    """Where the tag points now, or None."""
    history = tag_history(store, tag)
    return history[-1] if history else None


def list_tags(store: Any) -> list[TagEntry]:
    """Every tag under the prefix, where it points now: one listing of tags/, then one read_many."""
    keys = sorted(k for k in store.list_generations(TAGS_DIR, ".json") if k.endswith(".json"))
    found = []
    for key, read in zip(keys, store.read_many(keys)):
        if read is not None:
            entries = _parse(read.data, f"{store.root}/{key}")
            if entries:
                found.append(entries[-1])
    return found


def tag_files(store: Any) -> dict[str, str]:
    """Every tag file under the prefix: key -> generation, from one listing of tags/ (no reads)."""
    return {k: g for k, g in store.list_generations(TAGS_DIR, ".json").items() if k.endswith(".json")}


def read_tag_files(store: Any, keys: list[str]) -> dict[str, TagEntry | None]:
    """key -> where that tag file points now (one read_many); None for one gone or unreadable (the live
    view shows the others rather than fail)."""
    found: dict[str, TagEntry | None] = {}
    for key, read in zip(keys, store.read_many(keys)):
        try:
            entries = _parse(read.data, f"{store.root}/{key}") if read is not None else []
        except StatusError:
            entries = []
        found[key] = entries[-1] if entries else None
    return found


def tag_lookup(open_store: Callable[[], Any]) -> Callable[[str], TagEntry | None]:
    """The graph builder's tag resolver (executor.core.graph.build_graph(tags=...)): the store is
    opened on the first tag asked for, so a graph reading no tag opens and reads nothing."""
    opened: list[Any] = []

    def lookup(tag: str) -> TagEntry | None:
        if not opened:
            opened.append(open_store())
        return read_tag(opened[0], tag)

    return lookup


def tagged_output(store: Any, rel: str) -> tuple[str, str, str]:
    """(step id, digest, output rel of the files) of the SUCCESS output at `rel`; an ExecutorError otherwise."""
    read = store.read(status_key(rel))
    if read is None:
        raise ExecutorError(f"no output at {store.root}/{rel}: run the step first (a tag points at a completed output)")
    status = parse_status(read.data, f"{store.root}/{status_key(rel)}")
    if status.state != State.SUCCESS:
        raise ExecutorError(f"{status.step_id} is {status.state.value}, not SUCCESS: a tag points at a completed output")
    files_at = (status.alias_of or {}).get("output_rel") or rel
    return status.step_id, status.digest, files_at


def tag(store: Any, rel: str, tag_name: str, *, by: Mapping[str, Any] | None = None, at: float = 0.0,
        force: bool = False, reason: str | None = None) -> TagEntry:
    """Point `tag_name` (name@version) at the completed output at `rel` (relative to the prefix).

    A new version is created only if absent (compare-and-swap); a taken version raises TagTaken
    unless `force` with a `reason`, which appends an entry by CAS (the history stays).
    Tagging the output a version already points at is a no-op that returns its entry.
    """
    split_tag(tag_name)
    if force and not (reason and reason.strip()):
        raise ExecutorError(f"moving tag {tag_name!r} needs a reason (--reason \"...\"): it changes the id of "
                            f"every step that reads it")
    step_id, digest, files_at = tagged_output(store, rel)
    entry = TagEntry(tag_name, step_id, digest, files_at, dict(by or {}), at, reason)
    key = tag_key(tag_name)
    if store.create_if_absent(key, _dump(tag_name, [entry])) is not None:
        return entry
    for _ in range(_MOVE_TRIES):
        read = store.read(key)
        history = _parse(read.data, f"{store.root}/{key}") if read is not None else []
        current = history[-1] if history else None
        if current is not None and current.digest == digest:
            return current
        if not force:
            who = ", ".join(f"{v}" for k, v in (current.by if current else {}).items() if k in ("user", "host"))
            raise TagTaken(f"tag {tag_name!r} already points at {current.step_id if current else '?'} "
                           f"(digest {current.digest[:16] if current else '?'}…, by {who or 'unknown'}); a version "
                           f"once taken is not moved: pick a new version, or move it with --force --reason \"...\"")
        moved = TagEntry(tag_name, step_id, digest, files_at, dict(by or {}), at, reason,
                         moved_from=current.digest if current else None)
        if read is None:
            if store.create_if_absent(key, _dump(tag_name, [moved])) is not None:
                return moved
        elif store.replace_if_generation(key, _dump(tag_name, [*history, moved]), read.generation) is not None:
            return moved
    raise ExecutorError(f"tag {tag_name!r} kept changing while it was being moved; try again")
