"""The download step: copy source files (any fsspec URL or glob) into the step's output, verified.

Each file is streamed to a temporary name beside its destination, hashed (sha256) on the way,
checked against `expected_sha256` when given, and only then renamed to its final name, so a
partial or corrupted file never sits under the final name. Transient failures (connection
errors, truncated bodies, HTTP 5xx/408/429) are retried with exponential backoff; a missing
source (404) or a checksum mismatch fails at once with a message naming the file. A re-run skips
files whose size and sha256 match `manifest.json`.

HTTP(S) sources saved to a local directory resume instead of starting over: the bytes received so
far stay in `<name>.resumable` (with `<name>.resumable.json` naming the source URL, its ETag /
Last-Modified and total size), and the next attempt, in this run or in a re-run of the step after
a kill, asks for the rest with `Range` + `If-Range`. A server that ignores the range, or a source
that changed (another validator or size), starts the file over from byte 0. (A server without ETag
or Last-Modified shows only a change of size; `expected_sha256` catches the rest.)

Layout: `<output_path>/<files_subdir>/<name>` for each file, and `<output_path>/manifest.json`
= {"schema": 1, "files": [{"name", "source", "size", "sha256"}]}. A single-file source keeps its
base name; files matched by a glob or found under a directory keep their path relative to it.
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.download", DATA)

import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any


from executor import Location, Progress, execution_only, map_shards, open_file, secret, url_to_fs

from steps.documents import read_json, remove_stale_temporaries, write_json_atomically
from steps.http_resume import RESUMABLE_SUFFIX, Partial, TruncatedBody, body_start, hash_file, open_http

MANIFEST_SCHEMA = 1


class DownloadError(RuntimeError):
    """A source could not be copied (after retries, where retrying made sense)."""


class SourceNotFound(DownloadError):
    """A source URL or path does not exist (HTTP 404, no such file, a glob matching nothing)."""


class ChecksumMismatch(DownloadError):
    """A copied file's sha256 differs from `expected_sha256`; it was not kept."""


@dataclass(frozen=True)
class DownloadConfig:
    sources: list[str]
    output_path: str
    expected_sha256: dict[str, str] | None = None
    """sha256 hex digests keyed by destination name (or by source URL) to verify files against."""
    files_subdir: str = "docs"
    """Files go under <output_path>/<files_subdir>; "" puts them directly in output_path."""
    max_attempts: int = execution_only(5)
    backoff_initial_s: float = execution_only(0.5)
    backoff_max_s: float = execution_only(30.0)
    chunk_bytes: int = execution_only(4 << 20)
    read_timeout_s: float = execution_only(60.0)
    """Seconds an HTTP read may stall before the attempt fails (and the next one resumes)."""
    storage_options: dict[str, Any] | None = secret()
    """fsspec options for the sources (endpoints, tokens): never hashed nor written to records."""
    source_root: str | None = execution_only(None)
    """Directory that relative local sources are read from (default: the working directory). Not
    hashed, so an experiment can name committed data by a relative path (ids do not depend on where
    the checkout lives) and still run from any directory."""

    def __post_init__(self) -> None:
        if isinstance(self.sources, str) or not self.sources:
            raise ValueError(f"DownloadConfig.sources={self.sources!r}: give a non-empty list of URLs or paths")


@dataclass
class _FileJob:
    source: str
    name: str
    destination: str
    expected_sha256: str | None
    previous: dict | None
    config: DownloadConfig = field(repr=False)


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def expand_sources(sources: list[str], storage_options: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(source URL, destination name) for every file the sources name, in a fixed order."""
    found: list[tuple[str, str]] = []
    for source in sources:
        if _is_http(source):
            found.append((source, source.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]))
            continue
        fs, path = url_to_fs(source, **(storage_options or {}))
        protocol = Location(source).protocol
        url = (lambda p: p) if protocol == "file" else (lambda p: f"{protocol}://{p}")
        if any(ch in path for ch in "*?["):
            root = path[: min(path.find(ch) for ch in "*?[" if ch in path)].rsplit("/", 1)[0]
            try:
                matches = sorted(p for p in fs.glob(path) if fs.isfile(p))
            except ValueError as e:  # e.g. fsspec's "'**' can only be an entire path component"
                raise ValueError(f"DownloadConfig.sources: {source!r} is not a valid glob ({e}); "
                                 f"write e.g. 'dir/**/*.jsonl'") from None
            if not matches:
                raise SourceNotFound(f"source {source!r}: the glob matched no files; check the pattern")
            found.extend((url(p), p[len(root):].lstrip("/")) for p in matches)
        elif not fs.exists(path):
            raise SourceNotFound(f"source {source!r} does not exist; check the path or URL")
        elif fs.isdir(path):
            matches = sorted(fs.find(path))
            if not matches:
                raise SourceNotFound(f"source {source!r} is an empty directory")
            found.extend((url(p), p[len(path.rstrip('/')):].lstrip("/")) for p in matches)
        else:
            found.append((url(path), path.rstrip("/").rsplit("/", 1)[-1]))
    names: dict[str, str] = {}
    for url_, name in found:
        if name in names:
            raise ValueError(f"sources {names[name]!r} and {url_!r} would both be saved as {name!r}; "
                             f"download them in separate steps or rename one")
        names[name] = url_
    return found


def _sha256_of(path: str, chunk_bytes: int) -> tuple[int, str]:
    size, digest = hash_file(path, chunk_bytes)
    return size, digest.hexdigest()


def _is_permanent(error: BaseException) -> bool:
    status = getattr(error, "status", None) or getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        return True
    return isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, ChecksumMismatch))


def _check_sha256(job: _FileJob, sha: str, size: int) -> None:
    if job.expected_sha256 is not None and sha != job.expected_sha256.lower():
        raise ChecksumMismatch(
            f"{job.source}: sha256 {sha} ({size} bytes) differs from expected_sha256[{job.name!r}] = "
            f"{job.expected_sha256}; the file was not kept. Check the source, or update the expected checksum")


def _copy_once(job: _FileJob) -> tuple[int, str]:
    """Stream source -> temporary file -> verified -> final name. Returns (size, sha256).

    Each attempt starts from byte 0: used for local, gs:// and s3:// sources (whose reads rarely
    fail midway) and for HTTP sources saved to an object store (which cannot append)."""
    config = job.config
    dest_fs, dest = url_to_fs(job.destination)
    dest_fs.makedirs(dest.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{dest}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    open_options = {"block_size": 0} if _is_http(job.source) else {}
    digest, size = hashlib.sha256(), 0
    try:
        source = open_file(job.source, "rb", storage_options=config.storage_options, **open_options)
        with source as src, dest_fs.open(tmp, "wb") as dst:
            progress = Progress(f"download {job.name}", total=getattr(src, "size", None), unit="bytes")
            while chunk := src.read(config.chunk_bytes):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
                progress.update(len(chunk))
        sha = digest.hexdigest()
        _check_sha256(job, sha, size)
        dest_fs.mv(tmp, dest)
        progress.close()
        return size, sha
    finally:
        if dest_fs.exists(tmp):
            dest_fs.rm(tmp)


def _resumable(job: _FileJob) -> tuple[Partial, dict[str, str]] | None:
    """The kept-bytes state and request headers for an HTTP source saved to a local directory; None
    for other sources, for object-store destinations, and when `storage_options` holds more than
    `headers` (options only fsspec's HTTP filesystem understands: copied with it, from byte 0)."""
    options = job.config.storage_options or {}
    dest_fs, dest = url_to_fs(job.destination)
    if not _is_http(job.source) or set(options) - {"headers"} or "file" not in dest_fs.protocol:
        return None
    return Partial(dest + RESUMABLE_SUFFIX), dict(options.get("headers") or {})


def _copy_http_resumable(job: _FileJob, partial: Partial, headers: dict[str, str]) -> tuple[int, str]:
    """One attempt at an HTTP source: continue the kept bytes where the server allows, else start
    them over; verify, then rename into place. Returns (size, sha256)."""
    config = job.config
    dest = partial.path[: -len(RESUMABLE_SUFFIX)]
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    partial.sync(job.source, config.chunk_bytes)
    response = open_http(job.source, partial, headers, config.read_timeout_s)
    start = None if response is None else body_start(job.source, response, partial)
    if start is None:  # the source changed under the kept bytes: drop them and ask for the whole file
        if response is not None:
            response.close()
        partial.discard()
        response = open_http(job.source, partial, headers, config.read_timeout_s)
        start = body_start(job.source, response, partial)
    with response:
        length = response.headers.get("Content-Length")
        if start == 0:
            partial.restart({"schema": 1, "source": job.source, "etag": response.headers.get("ETag"),
                             "last_modified": response.headers.get("Last-Modified"),
                             "total": int(length) if length and length.isdigit() else None})
        else:
            partial.resumed_bytes += start
        end = start + int(length) if length and length.isdigit() else partial.meta.get("total")
        progress = Progress(f"download {job.name}", total=partial.meta.get("total"), unit="bytes")
        progress.update(partial.size)
        with open(partial.path, "ab") as dst:
            while chunk := response.read(config.chunk_bytes):
                dst.write(chunk)
                partial.digest.update(chunk)
                partial.size += len(chunk)
                progress.update(len(chunk))
    if end is not None and partial.size != end:
        raise TruncatedBody(f"the body ended after byte {partial.size} of {end}")
    size, sha = partial.size, partial.digest.hexdigest()
    try:
        _check_sha256(job, sha, size)
    except ChecksumMismatch:
        partial.discard()
        raise
    os.replace(partial.path, dest)
    partial.discard()  # the sidecar
    progress.close()
    return size, sha


def _fetch_file(job: _FileJob) -> dict[str, Any]:
    """Copy one file with retries; a result dict (with "error" instead of raising, so that the
    files that did arrive still reach the manifest)."""
    config = job.config
    previous = job.previous
    if previous is not None and url_to_fs(job.destination)[0].exists(job.destination):
        size, sha = _sha256_of(job.destination, config.chunk_bytes)
        if (size, sha) == (previous["size"], previous["sha256"]) and job.expected_sha256 in (None, sha):
            return {"name": job.name, "source": job.source, "size": size, "sha256": sha,
                    "skipped": True, "attempts": 0, "resumed_bytes": 0}
    resumable = _resumable(job)
    partial = resumable[0] if resumable else None
    for attempt in range(1, config.max_attempts + 1):
        try:
            size, sha = _copy_http_resumable(job, *resumable) if resumable else _copy_once(job)
            return {"name": job.name, "source": job.source, "size": size, "sha256": sha,
                    "skipped": False, "attempts": attempt, "resumed_bytes": partial.resumed_bytes if partial else 0}
        except Exception as error:  # noqa: BLE001 - classified below
            if isinstance(error, FileNotFoundError):
                if partial is not None:
                    partial.discard()
                return {"name": job.name, "error": "not_found", "attempts": attempt,
                        "message": f"source {job.source!r} was not found (HTTP 404 or no such file); "
                                   f"check the URL"}
            if _is_permanent(error) or attempt == config.max_attempts:
                return {"name": job.name, "error": type(error).__name__, "attempts": attempt,
                        "message": str(error) if isinstance(error, ChecksumMismatch) else
                        f"source {job.source!r}: {type(error).__name__}: {error} (attempt {attempt} of "
                        f"{config.max_attempts}{'; not retried' if _is_permanent(error) else ''})"
                        + (f"; {partial.size} bytes kept in {job.name}{RESUMABLE_SUFFIX}, a re-run resumes from there"
                           if partial is not None and partial.size else "")}
            time.sleep(min(config.backoff_max_s, config.backoff_initial_s * 2 ** (attempt - 1)))
    raise AssertionError("unreachable")


def _under(root: str | None, source: str) -> str:
    """A relative local source, read from `root`; URLs and absolute paths as they are."""
    if root is None or "://" in source or os.path.isabs(source):
        return source
    return os.path.join(root, source)


def download(config: DownloadConfig) -> dict[str, Any]:
    files = expand_sources([_under(config.source_root, s) for s in config.sources], config.storage_options)
    remove_stale_temporaries(config.output_path)
    expected = {(_under(config.source_root, k) if k in config.sources else k): v
                for k, v in (config.expected_sha256 or {}).items()}
    by_source = {source: name for source, name in files}
    unknown = [k for k in expected if k not in by_source and k not in by_source.values()]
    if unknown:
        raise ValueError(f"expected_sha256 names {unknown}, which no source produced; "
                         f"the files are {sorted(by_source.values())}")
    root = config.output_path.rstrip("/")
    files_root = f"{root}/{config.files_subdir.strip('/')}" if config.files_subdir.strip("/") else root
    manifest_path = f"{root}/manifest.json"
    previous = {entry["name"]: entry for entry in (read_json(manifest_path) or {}).get("files", [])}
    jobs = [_FileJob(source, name, f"{files_root}/{name}", expected.get(name, expected.get(source)),
                     previous.get(name), config) for source, name in files]
    results = map_shards(_fetch_file, jobs, desc="download")

    done = [r for r in results if "error" not in r]
    write_json_atomically(manifest_path, {
        "schema": MANIFEST_SCHEMA,
        "files_subdir": config.files_subdir,
        "files": [{k: r[k] for k in ("name", "source", "size", "sha256")} for r in done],
    })
    failed = [r for r in results if "error" in r]
    if failed:
        cls = (ChecksumMismatch if all(r["error"] == "ChecksumMismatch" for r in failed) else
               SourceNotFound if all(r["error"] == "not_found" for r in failed) else DownloadError)
        raise cls(f"{len(failed)} of {len(results)} file(s) failed:\n  " + "\n  ".join(r["message"] for r in failed))
    return {
        "files": len(done),
        "downloaded": sum(not r["skipped"] for r in done),
        "skipped_complete": sum(r["skipped"] for r in done),
        "bytes": sum(r["size"] for r in done),
        "bytes_downloaded": sum(r["size"] for r in done if not r["skipped"]),
        "retries": sum(max(0, r["attempts"] - 1) for r in done),
        "resumed_bytes": sum(r["resumed_bytes"] for r in done),
    }
