"""Reaching step outputs through fsspec: the filesystem for a prefix, paths, JSON files, manifests."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.core import urls
from executor.core.errors import ExecutorError
from executor.core.locations import Storage, storage_from
from executor.core.record import EXECUTOR_DIR, parse_record, parse_run_file
from executor.engine.prefix import location

if TYPE_CHECKING:
    import fsspec

CHUNK = 1 << 20


def normalize_prefix(prefix: str) -> str:
    """Local prefixes (plain paths, `file://`) become absolute paths; URLs lose a trailing slash and
    their scheme's alias (`gcs://` -> `gs://`, `s3a://` -> `s3://`)."""
    if not urls.is_local(prefix):
        return urls.canonical(prefix).rstrip("/")
    return str(Path(urls.canonical(prefix)).expanduser().absolute())


def is_local(prefix: str) -> bool:
    """A prefix on this machine's disk (executor.core.urls decides)."""
    return urls.is_local(prefix)


def join(prefix: str, *parts: str | None) -> str:
    joined = prefix.rstrip("/")  # a loop, not a generator: a plan joins one output path per step
    for part in parts:
        if part:
            joined += "/" + part.strip("/")
    return joined


def filesystem(prefix: str, storage_options: Storage | dict[str, Any] | None = None) -> "fsspec.AbstractFileSystem":
    """The prefix's filesystem with the options given for it (a Storage, an object keyed by location,
    or one object for the prefix's protocol), opened (and fsspec imported) on first use: a no-op
    re-run, whose statuses are read through the coordination store, never touches it."""
    where = storage_from(storage_options, prefix).location(prefix)
    return location.DeferredFilesystem(where)  # type: ignore[return-value]


def check_writable(prefix: str) -> None:
    """A local prefix must be creatable and writable; say so before anything runs."""
    if not is_local(prefix):
        return
    import tempfile  # here, as secrets below: planning imports this module and never writes

    path = Path(prefix)
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A name of its own: two runs in one process (or two processes) probe the same prefix at once
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=path)
        os.close(handle)
        os.unlink(probe)
    except OSError as e:
        raise ExecutorError(f"prefix {prefix} is not writable ({e.strerror}); pass --prefix DIR "
                            f"or set EXECUTOR_PREFIX to a directory you can write") from None


def write_json(fs: "fsspec.AbstractFileSystem", path: str, data: bytes) -> None:
    """Write a small file whole: to a temporary name, then moved into place where possible."""
    from fsspec.implementations.local import LocalFileSystem

    fs = location.opened(fs)
    if isinstance(fs, LocalFileSystem):
        import secrets

        tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"  # two writers in one process: their own
        fs.pipe_file(tmp, data)
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)  # object stores replace objects atomically


def read_bytes(fs: "fsspec.AbstractFileSystem", path: str) -> bytes | None:
    """A file's bytes, or None if it does not exist."""
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def read_json(fs: "fsspec.AbstractFileSystem", path: str) -> Any | None:
    data = read_bytes(fs, path)
    return None if data is None else json.loads(data)


def read_record(fs: "fsspec.AbstractFileSystem", path: str) -> dict[str, Any] | None:
    """A record.json checked against its schema (None if absent; StatusError if unreadable)."""
    data = read_bytes(fs, path)
    return None if data is None else parse_record(data, path)


def read_run_file(fs: "fsspec.AbstractFileSystem", path: str) -> dict[str, Any] | None:
    """A run file checked against its schema (None if absent; StatusError if unreadable)."""
    data = read_bytes(fs, path)
    return None if data is None else parse_run_file(data, path)


def store_checksum(info: dict[str, Any]) -> dict[str, str] | None:
    """The checksum an object store reports in a file's metadata (crc32c, MD5, a single-part ETag), if any."""
    for key, algorithm in (("crc32c", "crc32c"), ("md5Hash", "md5-base64")):
        if info.get(key):
            return {"algorithm": algorithm, "value": str(info[key])}
    etag = info.get("ETag") or info.get("etag")
    if etag and "-" not in str(etag).strip('"'):
        return {"algorithm": "s3-etag-md5", "value": str(etag).strip('"')}
    return None


def stored_checksum(url: str) -> dict[str, str] | None:
    """The checksum the store keeps for the file at `url`, as a manifest of an output holding it
    records it (`{"algorithm", "value"}`: crc32c, MD5, a single-part ETag), from the file's metadata
    with the step's storage options; None where the store keeps none (local disk: a manifest
    records the file's sha256 there). An incremental step that reads a file's bytes anyway can
    note both, so a dry run can translate a bucket manifest's checksum (steps/shard_reuse.py)."""
    fs, target = location.url_to_fs(url)
    return store_checksum(fs.info(target))


def file_checksum(fs: "fsspec.AbstractFileSystem", path: str, info: dict[str, Any]) -> dict[str, str]:
    """One file's checksum as a manifest entry holds it: the store's own (crc32c, MD5, ETag), else
    sha256 of its bytes."""
    stored = store_checksum(info)
    if stored is not None:
        return stored
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return {"algorithm": "sha256", "value": digest.hexdigest()}


# fsspec's memory filesystem lists by iterating one process-wide dict, which steps running as threads
# of this process add files to meanwhile: the listing can fail with "dictionary changed size during
# iteration" (fsspec/filesystem_spec PR #893, open). A listing only reads, so it is simply taken again.
LISTING_TRIES = 5


def find_files(fs: "fsspec.AbstractFileSystem", root: str) -> dict[str, dict[str, Any]]:
    """fs.find(root, detail=True), taken again when it raced a writer in this process."""
    for _ in range(LISTING_TRIES - 1):
        try:
            return fs.find(root, detail=True)
        except RuntimeError as e:
            if "changed size during iteration" not in str(e):
                raise
    return fs.find(root, detail=True)


def manifest(fs: "fsspec.AbstractFileSystem", output_path: str) -> list[dict[str, Any]]:
    """Every file under a step's output (except .executor/) with its size and checksum."""
    root = output_path.rstrip("/")
    try:
        found = find_files(fs, root)
    except FileNotFoundError:
        return []
    entries = []
    bare_root = location.bare_path(root)
    for full, info in sorted(found.items()):
        rel = location.bare_path(full)[len(bare_root) + 1:]
        if rel.split("/", 1)[0] == EXECUTOR_DIR or info.get("type") == "directory":
            continue
        entries.append({"path": rel, "size": int(info.get("size") or 0),
                        "checksum": file_checksum(fs, full, info)})
    return entries
