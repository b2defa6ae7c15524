"""Mirrored inputs (`mirrored("gs://bucket/raw/corpus")`, `--mirror-sources`): what a run must copy, from where.

A mirrored input is a fixed input that several buckets may hold. Before a step reading it runs, it
is copied once into `<prefix>/mirror/<bucket>/<key>` (executor.engine.transfers.mirror_copy) and the step
reads that copy. Here, at planning: for each mirrored input of a step the plan will run, its
status under the prefix (`mirror/.executor/<bucket>/<key>/status.json`, the lease and SUCCESS
marker of the copy) is read; unless it is complete there, the logical URL itself and then
`<source>/<key>` for each mirror source are listed, each file with the size and checksum its store
reports, so the copy can check every byte and the transfer budget can count them. A local file (its
store reports no checksum) is listed with its size and mtime only: planning reads no bytes, and the copy
hashes it as it streams and refuses it if a stat after the copy differs from the listing. An input found in
no source is an error naming the step, the field, the URL and every place tried.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from executor.core.errors import ExecutorError
from executor.core.locations import Storage
from executor.core.plan import Action, Observed, Plan
from executor.core.record import EXECUTOR_DIR, State
from executor.core.step import MirroredPath
from executor.core.tree import fold, format_path
from executor.engine.prefix import location, outputs

ENV_VAR = "EXECUTOR_MIRROR_SOURCES"
FLAG = "--mirror-sources"


@dataclass(frozen=True)
class Candidate:
    """A place holding the input: its URL, the directory the copy reads from, and its files there."""

    url: str
    root: str  # `url` for a directory; its parent for a single file
    files: tuple[dict[str, Any], ...]  # path (relative to root), size, checksum as the store reports them

    @property
    def bytes(self) -> int:
        return sum(int(f.get("size") or 0) for f in self.files)


@dataclass(frozen=True)
class MirrorInput:
    """One mirrored input a run needs: where its copy goes, its status there, where it can come from."""

    logical: str
    rel: str  # mirror/<bucket>/<key>, relative to the prefix: what the step reads
    readers: tuple[str, ...]  # "step (field)" for each step of the plan reading it
    observed: Observed  # its status under the prefix at planning
    candidates: tuple[Candidate, ...] = ()  # in order: the logical URL, then each source (empty if complete)
    tried: tuple[str, ...] = ()  # every place looked in, with why it was not used

    @property
    def digest(self) -> str:
        return mirror_digest(self.logical)

    @property
    def complete(self) -> bool:
        status = self.observed.status
        return status is not None and status.state == State.SUCCESS and status.digest == self.digest

    @property
    def copied_elsewhere(self) -> bool:
        """Another runner holds its lease now: this run waits for that copy."""
        status = self.observed.status
        return status is not None and status.state == State.RUNNING

    @property
    def bytes_to_copy(self) -> int:
        """What this run plans to transfer for it (0 when complete here or being copied elsewhere)."""
        if self.complete or self.copied_elsewhere or not self.candidates:
            return 0
        return self.candidates[0].bytes

    def describe(self) -> str:
        if self.complete:
            return f"mirror {self.logical}: complete at {self.rel}"
        if self.copied_elsewhere:
            return f"mirror {self.logical}: being copied by another runner; waiting for it"
        first = self.candidates[0]
        others = f" (also at {', '.join(c.url for c in self.candidates[1:])})" if len(self.candidates) > 1 else ""
        return (f"mirror {self.logical}: copy {human_bytes(first.bytes)} ({len(first.files)} files) from "
                f"{first.url}{others} to {self.rel}")


def human_bytes(n: float) -> str:
    from executor.engine.transfers.cache_from import human_bytes as cache_human_bytes

    return cache_human_bytes(n)


def mirror_digest(logical: str) -> str:
    """The digest a mirror copy's status carries: of its logical URL (which source it came from is not part)."""
    return hashlib.sha256(b"mirror\0" + logical.encode()).hexdigest()


def coordination_rel(rel: str) -> str:
    """Where the copy's status and record live: `mirror/.executor/<bucket>/<key>`, outside the copied
    files (a single-file input has no directory of its own to hold them)."""
    return f"mirror/{EXECUTOR_DIR}/{rel[len('mirror/'):]}"


def status_key(rel: str) -> str:
    return f"{coordination_rel(rel)}/status.json"


def record_key(rel: str) -> str:
    return f"{coordination_rel(rel)}/record.json"


def mirror_sources_list(given: Sequence[str] | str | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The mirror sources (normalized, in order): `given` if any, else EXECUTOR_MIRROR_SOURCES (comma-separated)."""
    if isinstance(given, str):
        given = given.split(",")
    raw = list(given or []) or environ.get(ENV_VAR, "").split(",")
    return tuple(dict.fromkeys(outputs.normalize_prefix(p.strip()) for p in raw if p.strip()))


def mirrored_fields(config: Any) -> list[tuple[str, MirroredPath]]:
    """(field path, placeholder) for every mirrored input in a config."""
    found: list[tuple[str, MirroredPath]] = []

    def leaf(value: Any, path: tuple) -> Any:
        if isinstance(value, MirroredPath):
            found.append((format_path(path), value))
        return value

    fold(config, leaf, lambda value, children, path: value)
    return found


def _needed(plan: Plan) -> dict[str, tuple[MirroredPath, list[str]]]:
    """logical URL -> (placeholder, readers) over the steps the plan runs."""
    needed: dict[str, tuple[MirroredPath, list[str]]] = {}
    for decision in plan.decisions.values():
        if decision.action != Action.RUN or not decision.node.mirrored:  # found while hashing: no walk for most
            continue
        for field_path, placeholder in mirrored_fields(decision.node.step.config):
            entry = needed.setdefault(placeholder.url, (placeholder, []))
            entry[1].append(f"{decision.node.name} ({field_path})")
    return needed


def _listing(url: str, storage: Storage) -> tuple[Candidate | None, str]:
    """The files at `url` (a directory or one file), each with size and checksum; or None and why not."""
    try:
        fs, path = location.url_to_fs(url, storage)
        found = fs.find(path, detail=True)
    except FileNotFoundError:
        found = {}
    except Exception as e:  # noqa: BLE001 - an unreachable source is named with its error, then skipped
        return None, f"{url} (listing failed: {type(e).__name__}: {str(e)[:200]})"
    found = {k: v for k, v in found.items() if v.get("type") != "directory"}
    if not found:
        return None, f"{url} (nothing there)"
    bare = location.bare_path(path)
    if list(found) == [path] or [location.bare_path(k) for k in found] == [bare]:  # one file
        [(full, info)] = found.items()
        return Candidate(url, url.rsplit("/", 1)[0], (_entry(fs, full, url.rsplit("/", 1)[1], info),)), ""
    entries = [_entry(fs, full, location.bare_path(full)[len(bare) + 1:], info) for full, info in sorted(found.items())]
    return Candidate(url, url, tuple(entries)), ""


def _entry(fs: Any, full: str, rel: str, info: dict[str, Any]) -> dict[str, Any]:
    """One listed file as the copy checks it: the checksum its store reports; for a local file (none
    reported) its size and mtime only, so planning reads no bytes: the copy hashes it as it streams and
    stats it again after (executor.engine.transfers.copy_output); elsewhere sha256 of its bytes."""
    from fsspec.implementations.local import LocalFileSystem

    entry: dict[str, Any] = {"path": rel, "size": int(info.get("size") or 0)}
    if outputs.store_checksum(info) is None and info.get("mtime") is not None \
            and isinstance(location.opened(fs), LocalFileSystem):
        return {**entry, "mtime": float(info["mtime"]), "checksum": {"algorithm": "sha256"}}
    return {**entry, "checksum": outputs.file_checksum(fs, full, info)}


def find_candidates(placeholder: MirroredPath, sources: Sequence[str],
                    storage: Storage) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """Every place holding the input, in order (the logical URL first), and what was tried in vain."""
    found, tried = [], []
    for url in dict.fromkeys([placeholder.url, *(outputs.join(s, placeholder.key) for s in sources)]):
        candidate, why = _listing(url, storage)
        if candidate is None:
            tried.append(why)
        else:
            found.append(candidate)
    return tuple(found), tuple(tried)


def plan_mirrors(plan: Plan, store: Any, sources: Sequence[str], storage: Storage) -> dict[str, MirrorInput]:
    """The mirrored inputs of the steps `plan` runs, by logical URL: complete here, or where to copy them from.
    ExecutorError for one found in no source (and copied by no other runner)."""
    from executor.engine.run.snapshot import observe

    planned: dict[str, MirrorInput] = {}
    for logical, (placeholder, readers) in _needed(plan).items():
        rel = placeholder.mirror_rel
        key = status_key(rel)
        observed = observe(store.read(key), f"{store.root}/{key}")
        entry = MirrorInput(logical, rel, tuple(readers), observed)
        if not entry.complete:
            candidates, tried = find_candidates(placeholder, sources, storage)
            entry = MirrorInput(logical, rel, tuple(readers), observed, candidates, tried)
            if not candidates and not entry.copied_elsewhere:
                raise not_found_error(entry, sources)
        planned[logical] = entry
    return planned


def not_found_error(entry: MirrorInput, sources: Sequence[str]) -> ExecutorError:
    where = "; ".join(entry.tried)
    fix = (f"name a bucket or prefix that holds it with {FLAG} URL (env {ENV_VAR})" if not sources else
           f"copy it to one of them, or add a source that holds it to {FLAG} (env {ENV_VAR})")
    return ExecutorError(f"mirrored input {entry.logical}, read by {', '.join(entry.readers)}, was found in no "
                         f"source; tried: {where}. Nothing was started; {fix}")


def planned_bytes(mirrors: Mapping[str, MirrorInput]) -> int:
    return sum(m.bytes_to_copy for m in mirrors.values())
