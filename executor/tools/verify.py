"""Verified outputs: check completed steps' files against the manifests in their records.

A step's record lists every output file with size and checksum (and the checksum's algorithm:
sha256 of the bytes locally, the object's MD5/CRC32C metadata on S3/GCS). Verification lists
the output again and reports files that are missing, changed (size or checksum) or extra. Only
steps whose status is SUCCESS for the record's digest are verified; an adopted step is verified
through the output it points at. Reads only.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import fsspec

from executor.engine.prefix import location
from executor.engine.prefix import outputs
from executor.engine.worker.progress import Progress, human_bytes
from executor.core.record import EXECUTOR_DIR, Absent, State, Status, record_key, status_key
from executor.engine.prefix.prefix_view import StepDetail
from executor.engine.prefix.prefixes import OpenedPrefix

CHUNK = 1 << 20
STATUS_FILE, RECORD_FILE = status_key("").lstrip("/"), record_key("").lstrip("/")  # as a step's problems name them


@dataclass(frozen=True)
class Problem:
    kind: str  # missing | changed | extra | unverifiable
    file: str
    detail: str = ""

    def render(self) -> str:
        return f"{self.kind:<8} {self.file}" + (f"  ({self.detail})" if self.detail else "")


@dataclass
class StepVerification:
    path: str
    step_id: str | None = None
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    note: str | None = None  # why the step was not (fully) verified
    verified: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


def _bare(fs: fsspec.AbstractFileSystem, path: str) -> str:
    return location.bare_path(path)


OnBytes = Callable[[int], None]  # told how many bytes were just hashed (for progress)


def _ignore(n: int) -> None:
    pass


def _digest(fs: fsspec.AbstractFileSystem, path: str, make: Any, on_bytes: OnBytes = _ignore) -> Any:
    h = make()
    with fs.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            on_bytes(len(chunk))
    return h


def current_checksum(fs: fsspec.AbstractFileSystem, path: str, info: dict[str, Any], algorithm: str,
                     on_bytes: OnBytes = _ignore) -> str | None:
    """The file's checksum today in the recorded algorithm (None: cannot be computed here)."""
    if algorithm == "sha256":
        return _digest(fs, path, hashlib.sha256, on_bytes).hexdigest()
    if algorithm == "s3-etag-md5":
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
        return etag if etag and "-" not in etag else _digest(fs, path, hashlib.md5, on_bytes).hexdigest()
    if algorithm == "md5-base64":
        return info.get("md5Hash") or base64.b64encode(_digest(fs, path, hashlib.md5, on_bytes).digest()).decode()
    if algorithm == "crc32c":
        if info.get("crc32c"):
            return str(info["crc32c"])
        try:
            import google_crc32c
        except ImportError:
            return None
        checksum = _digest(fs, path, google_crc32c.Checksum, on_bytes)
        return base64.b64encode(checksum.digest()).decode()
    return None


def verify_step(fs: fsspec.AbstractFileSystem, step_path: str, record: dict[str, Any],
                on_bytes: OnBytes = _ignore) -> StepVerification:
    """Compare the files under `step_path` with the record's manifest."""
    result = StepVerification(step_path, record.get("step_id"), verified=True)
    root = _bare(fs, step_path)
    try:
        found = fs.find(step_path, detail=True)
    except FileNotFoundError:
        found = {}
    present = {}
    for full, info in found.items():  # files only: find lists no folders (without withdirs)
        rel = _bare(fs, full)[len(root) + 1:]
        if rel and rel.split("/", 1)[0] != EXECUTOR_DIR:
            present[rel] = (full, info)
    recorded = {e["path"]: e for e in record.get("manifest") or []}
    result.files = len(recorded)
    for rel, entry in sorted(recorded.items()):
        if rel not in present:
            result.problems.append(Problem("missing", rel, f"recorded {entry.get('size')} bytes"))
            continue
        full, info = present[rel]
        size = int(info.get("size") or 0)
        if size != int(entry.get("size", -1)):
            result.problems.append(Problem("changed", rel, f"size {entry.get('size')} -> {size} bytes"))
            continue
        checksum = entry.get("checksum") or {}
        algorithm = checksum.get("algorithm", "?")
        now = current_checksum(fs, full, info, algorithm, on_bytes)
        if now is None:
            result.problems.append(Problem("unverifiable", rel, f"cannot compute a {algorithm} checksum here"))
        elif now != checksum.get("value"):
            result.problems.append(Problem("changed", rel, f"{algorithm} {str(checksum.get('value'))[:16]}… -> "
                                                            f"{now[:16]}…"))
    for rel in sorted(set(present) - set(recorded)):
        size = int(present[rel][1].get("size") or 0)
        result.problems.append(Problem("extra", rel, f"{size} bytes, not in the manifest"))
    return result


class Views:
    """Read models of the folders that hold the steps being verified, one per folder: a step's
    status and record are read through them (engine/prefix/prefix_view.py), never by path. The opened
    prefix's own view serves the steps directly under it."""

    def __init__(self, opened: OpenedPrefix):
        self.opened, self._views = opened, {}

    def detail_of(self, step_path: str) -> StepDetail:
        parent, _, name = step_path.rstrip("/").rpartition("/")
        if parent not in self._views:
            self._views[parent] = self.opened.locate(step_path)[0]
        view = self._views[parent]
        rel = step_path.rstrip("/")[len(view.prefix) + 1:] if view is self.opened.view else name
        return view.step_at(rel, rows=(), runs=())


def verify_one(fs: fsspec.AbstractFileSystem, step_path: str, views: Views,
               on_bytes: OnBytes = _ignore) -> StepVerification:
    """Verify one step directory, given its status and record."""
    step_path = step_path.rstrip("/")
    detail = views.detail_of(step_path)
    row, status = detail.row, detail.status
    if row.state is Absent.NO_STATUS:
        return StepVerification(step_path, note="no status.json: not a completed step; skipped")
    if status is None:
        return StepVerification(step_path, problems=[Problem("unverifiable", STATUS_FILE,
                                                             f"{row.status_path}: {row.problem}")])
    if status.state != State.SUCCESS:
        return StepVerification(step_path, status.step_id, note=f"status is {status.state.value}; nothing to verify")
    if status.alias_of:
        return _verify_adopted(fs, step_path, status, views, on_bytes)
    if detail.record_problem:  # reported for this step; verification goes on with the others
        return StepVerification(step_path, status.step_id,
                                problems=[Problem("unverifiable", RECORD_FILE, detail.record_problem)])
    record = detail.record
    if record is None:
        return StepVerification(step_path, status.step_id,
                                problems=[Problem("missing", RECORD_FILE, "SUCCESS without a record")])
    if record.get("digest") != status.digest:
        return StepVerification(step_path, status.step_id, problems=[Problem(
            "changed", RECORD_FILE, f"record digest {str(record.get('digest'))[:12]}… does not "
                                    f"match the status digest {status.digest[:12]}…")])
    return verify_step(fs, step_path, dict(record), on_bytes)


def _verify_adopted(fs: fsspec.AbstractFileSystem, step_path: str, status: Status, views: Views,
                    on_bytes: OnBytes) -> StepVerification:
    """An adopted step, verified through the output it points at: one hop, as `adopt` writes them."""
    points_at = status.alias_of.get("output_rel")
    base = step_path[: -len(status.step_id)].rstrip("/") if step_path.endswith("/" + status.step_id) else None
    if base is None:
        return StepVerification(step_path, status.step_id, note=f"adopted; verify the output it points at: {points_at}")
    target_path = f"{base}/{points_at}"
    target = views.detail_of(target_path)
    if target.row.state is Absent.NO_STATUS:
        return StepVerification(step_path, status.step_id, problems=[Problem(
            "missing", points_at, "the output it was adopted from: no status.json there")])
    if target.status is not None and target.status.alias_of:  # adopt never writes one; following could loop
        further = target.status.alias_of.get("output_rel")
        return StepVerification(step_path, status.step_id, problems=[Problem(
            "unverifiable", STATUS_FILE, f"adopted from {points_at}, itself adopted from {further}: adoption is "
                                         f"one hop; adopt again with --from {further}")])
    result = verify_one(fs, target_path, views, on_bytes)
    how = ("verified the output it points at" if result.verified
           else f"the output it points at: {result.note or 'see its problems'}")
    result.note = f"adopted by {status.step_id}; {how}"
    return result


def step_directories(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    """Step output directories under `path` (directories holding .executor/), runs/ excluded."""
    root = _bare(fs, path)
    if fs.exists(f"{path.rstrip('/')}/{STATUS_FILE}"):
        return [path.rstrip("/")]
    steps = set()
    marker = f"/{EXECUTOR_DIR}/"
    for full in fs.find(path):
        rel = _bare(fs, full)[len(root) + 1:]
        if rel.startswith(("runs/", "mirror/.executor/")) or marker not in "/" + rel:  # history; mirror statuses
            continue
        steps.add(rel[: ("/" + rel).index(marker) - 1] if not rel.startswith(EXECUTOR_DIR + "/") else "")
    base = path.rstrip("/")
    return [f"{base}/{s}" if s else base for s in sorted(steps)]


def verify_path(opened: OpenedPrefix, path: str | None = None) -> list[StepVerification]:
    """Verify one step directory (`path`), or every completed step under the opened prefix."""
    path = opened.url if path is None else path
    if outputs.is_local(path):
        path = outputs.normalize_prefix(path)
    under = path == opened.url or path.startswith(opened.url.rstrip("/") + "/")
    fs = opened.filesystem if under else location.open_filesystem(path, opened.options_for_elsewhere)
    steps = step_directories(fs, path)
    progress = Progress("verify", total=len(steps), unit="steps")  # a line every few seconds, on stderr
    hashed = 0

    def on_bytes(n: int) -> None:  # a large file shows progress while it is being hashed
        nonlocal hashed
        hashed += n
        progress.desc = f"verify ({human_bytes(hashed)} hashed)"
        progress.update(0)

    results = []
    views = Views(opened)
    for step in steps:
        results.append(verify_one(fs, step, views, on_bytes=on_bytes))
        progress.update()
    return results
