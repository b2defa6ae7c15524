"""Resuming an HTTP download: the bytes kept so far, ranged requests, and whether a 206 continues them.

The kept bytes of a source live in `<dest>.resumable`, with `<dest>.resumable.json` naming the
source version they belong to (URL, ETag / Last-Modified, total size). A request for the rest
carries `Range` + `If-Range`, so a server whose file changed answers with the whole new body.
Used by steps.download for HTTP(S) sources saved to a local directory.
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.http_resume", DATA)

import hashlib
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


from executor import open_file

from steps.documents import read_json, write_json_atomically

RESUMABLE_SUFFIX = ".resumable"
"""Kept bytes of an HTTP source: not a marker `remove_stale_temporaries` deletes, so a re-run finds them."""
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class BadRangeAnswer(RuntimeError):
    """A 206 whose Content-Range does not answer the range asked for (retried like other faults)."""


def hash_file(path: str, chunk_bytes: int) -> tuple[int, Any]:
    """(size, sha256 hash object) of a file's bytes."""
    digest, size = hashlib.sha256(), 0
    with open_file(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
            size += len(chunk)
    return size, digest


class TruncatedBody(ConnectionError):
    """A response body ended before its Content-Length; retried, and the next attempt resumes."""


@dataclass
class Partial:
    """The bytes of an HTTP source kept so far, in `path` (`<dest>.resumable`), with the sidecar
    `<path>.json` = {"source", "etag", "last_modified", "total"} naming the source version they
    belong to, and in memory their size and running sha256. The file's own size is the resume point:
    a byte count in the sidecar could lag behind a writer that was killed."""

    path: str
    size: int = 0
    digest: Any = None
    meta: dict | None = None
    resumed_bytes: int = 0
    """Bytes kept rather than fetched again, summed over the resumes of this run."""

    @property
    def meta_path(self) -> str:
        return f"{self.path}.json"

    def sync(self, source: str, chunk_bytes: int) -> None:
        """Match the in-memory state to the files: kept after a failed attempt of this process when
        the file has the size it knows, else re-hashed from the file (a re-run after a kill, or a
        write that failed midway); dropped when the files have no sidecar or name another source."""
        on_disk = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        if self.digest is not None and on_disk == self.size:
            return
        meta = read_json(self.meta_path) if on_disk else None
        if not meta or meta.get("source") != source:
            self.discard()
            return
        self.meta = meta
        self.size, self.digest = hash_file(self.path, chunk_bytes)

    def restart(self, meta: dict) -> None:
        """Before the first byte of a whole body: empty the file, then name the new source version,
        so that a kill in between never pairs old bytes with a new validator."""
        self.discard()
        open(self.path, "wb").close()
        write_json_atomically(self.meta_path, meta)
        self.meta, self.digest = meta, hashlib.sha256()

    def discard(self) -> None:
        for path in (self.path, self.meta_path):
            if os.path.exists(path):
                os.remove(path)
        self.size, self.digest, self.meta = 0, None, None


def open_http(source: str, partial: Partial, headers: dict[str, str], timeout_s: float):
    """GET `source`, from `partial.size` on when bytes are kept (`If-Range`: only if the source is
    still the version they came from). None when the server cannot satisfy that range (HTTP 416:
    the source shrank, or the kept bytes are already the whole file)."""
    headers = {"Accept-Encoding": "identity", **headers}  # ranges count the bytes as stored
    if partial.size:
        headers["Range"] = f"bytes={partial.size}-"
        etag, modified = partial.meta.get("etag"), partial.meta.get("last_modified")
        validator = etag if etag and not etag.startswith("W/") else modified  # If-Range takes strong ETags only
        if validator:
            headers["If-Range"] = validator
    try:
        return urllib.request.urlopen(urllib.request.Request(source, headers=headers), timeout=timeout_s)
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 404:
            raise FileNotFoundError(f"{source}: HTTP 404") from error
        if error.code == 416 and partial.size:
            return None
        raise


def body_start(source: str, response, partial: Partial) -> int | None:
    """Where the response body starts in the file: the kept size for a 206 that continues the same
    source version, 0 for a whole body (200: the server ignored the range, or If-Range saw a
    change), None for a 206 of another version (another start, total size, ETag or Last-Modified)."""
    if response.status != 206:
        return 0
    match = _CONTENT_RANGE.fullmatch((response.headers.get("Content-Range") or "").strip())
    if not partial.size or match is None:
        raise BadRangeAnswer(f"{source}: HTTP 206 with Content-Range {response.headers.get('Content-Range')!r} "
                            f"to a request for bytes={partial.size}-")
    answered = {"total": None if match[3] == "*" else int(match[3]), "etag": response.headers.get("ETag"),
                "last_modified": response.headers.get("Last-Modified")}
    if int(match[1]) != partial.size or any(
            value is not None and partial.meta.get(key) not in (None, value) for key, value in answered.items()):
        return None
    return partial.size
