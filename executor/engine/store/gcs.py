"""Google Cloud Storage coordination store: object generations are the fencing tokens.

Reads take bytes and generation from one `alt=media` response (header `x-goog-generation`); writes
are multipart uploads with `ifGenerationMatch` (0 = create only if absent), so GCS itself decides
every race. Each call is exactly one HTTP request on this store's own aiohttp session, with the
endpoint and credentials of a gcsfs filesystem (its `base` URL and credentials object) but without
gcsfs's retry loop: a conditional upload retried blindly after a lost response comes back 412 and
hides that our write landed. Retrying, and resolving that ambiguity, is RetryingStore's job.

Against an emulator set GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false before importing gcsfs and pass
`endpoint_url=..., token="anon"` as storage options.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from typing import Any, Iterator, Mapping, NoReturn, Sequence
from urllib.parse import quote

import aiohttp
import gcsfs
from aiohttp import ClientConnectorError, ClientError  # plain names in except clauses: cosmic-ray mutates those only
from fsspec.asyn import sync

from executor.engine.store.base import READ_PARALLELISM, StoreError, TransientStoreError, Versioned, read_concurrently
from executor.engine.store.fs import BucketPrefix

_RETRYABLE_STATUS = frozenset({408, 429})  # and every 5xx
_PAGE_SIZE = 1000
_GLOB_SPECIAL = set("*?[]{}\\")


class GCSStore:
    """Coordination objects under `gs://bucket/path`; storage options go to gcsfs.GCSFileSystem."""

    def __init__(self, prefix: str, request_timeout_s: float = 30.0, match_glob: bool = True,
                 **storage_options: Any):
        self.location = BucketPrefix.parse(prefix, ("gs", "gcs"))
        self.root = self.location.url
        self.fs = gcsfs.GCSFileSystem(**storage_options)
        self._upload_base = self.fs.base.rstrip("/").removesuffix("/storage/v1") + "/upload/storage/v1/"
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.match_glob = match_glob  # filter listings server-side (turned off if refused)

    # -- the protocol -------------------------------------------------------------------------

    def read(self, key: str) -> Versioned | None:
        name = self.location.object_name(key)
        status, headers, body = self._request("GET", self._object_url(name), "read", name,
                                              params={"alt": "media"})
        if status == 404 and not _bucket_missing(body):
            return None
        if status != 200:
            self._fail("read", name, status, body)
        generation = headers.get("x-goog-generation")
        if not generation:
            raise StoreError(f"GCS read {self._where(name)}: the response carries no x-goog-generation "
                             "header, so it cannot be used for leases (is endpoint_url a real GCS API?)")
        return Versioned(body, generation)

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        """read() of each key, READ_PARALLELISM requests in flight (one request per key)."""
        return read_concurrently(self.read, keys, READ_PARALLELISM)

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        return self._upload(key, data, if_generation_match="0", what="create")

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        if not generation.isdigit() or generation == "0":
            return None  # not a GCS generation (e.g. from another store): it cannot match
        return self._upload(key, data, if_generation_match=generation, what="replace")

    def delete(self, key: str) -> None:
        name = self.location.object_name(key)
        status, _, body = self._request("DELETE", self._object_url(name), "delete", name)
        if status not in (200, 204) and not (status == 404 and not _bucket_missing(body)):
            self._fail("delete", name, status, body)

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        """One listing, 1,000 objects a page. `suffix` is also sent as a matchGlob filter so a
        prefix full of step outputs costs pages of status objects only; a server that refuses the
        glob (HTTP 400) gets the plain listing, filtered here."""
        list_prefix = self.location.list_prefix(prefix)
        glob = None
        if self.match_glob and suffix and not (_GLOB_SPECIAL & set(list_prefix + suffix)):
            glob = f"{list_prefix}**{suffix}"
        try:
            return self._list(list_prefix, suffix, glob)
        except _GlobRefused:
            self.match_glob = False
            return self._list(list_prefix, suffix, None)

    def _list(self, list_prefix: str, suffix: str, glob: str | None) -> dict[str, str]:
        params: dict[str, Any] = {"prefix": list_prefix, "maxResults": _PAGE_SIZE,
                                  "fields": "items(name,generation),nextPageToken"}
        if glob:
            params["matchGlob"] = glob
        url = f"{self.fs.base}b/{quote(self.location.bucket, safe='')}/o"
        found: dict[str, str] = {}
        while True:
            status, _, body = self._request("GET", url, "list", list_prefix + "*", params=params)
            if status == 400 and glob:
                raise _GlobRefused()
            if status != 200:
                self._fail("list", list_prefix + "*", status, body)
            page = json.loads(body)
            for item in page.get("items", []):
                if item["name"].endswith(suffix):
                    found[self.location.key_of(item["name"])] = str(item["generation"])
            token = page.get("nextPageToken")
            if not token:
                return found
            params["pageToken"] = token

    # -- one HTTP request ---------------------------------------------------------------------

    def _upload(self, key: str, data: bytes, if_generation_match: str, what: str) -> str | None:
        name = self.location.object_name(key)
        boundary = f"stepgraph-{uuid.uuid4().hex}"
        metadata = json.dumps({"name": name, "contentType": "application/octet-stream"})
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{metadata}\r\n"
                f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
        body += bytes(data) + f"\r\n--{boundary}--\r\n".encode()
        url = f"{self._upload_base}b/{quote(self.location.bucket, safe='')}/o"
        status, _, response = self._request(
            "POST", url, what, name, data=body,
            params={"uploadType": "multipart", "ifGenerationMatch": if_generation_match},
            headers={"Content-Type": f'multipart/related; boundary="{boundary}"'})
        if status == 412:
            return None  # lost the race: the object exists, or its generation moved on
        if status != 200:
            self._fail(what, name, status, response)
        return str(json.loads(response)["generation"])

    def _object_url(self, name: str) -> str:
        return f"{self.fs.base}b/{quote(self.location.bucket, safe='')}/o/{quote(name, safe='')}"

    def _request(self, method: str, url: str, what: str, name: str, *, params: dict | None = None,
                 headers: dict | None = None, data: bytes | None = None) -> tuple[int, Mapping[str, str], bytes]:
        try:  # fsspec's documented bridge into an async filesystem's own event loop (fs.loop)
            return sync(self.fs.loop, self._send, method, url, params or {}, headers, data)
        except ClientConnectorError as e:  # refused, or no such host: as a wrong endpoint_url is
            raise TransientStoreError(f"GCS {what} {self._where(name)}: {e} (retryable; check "
                                      f"endpoint_url={self.fs.base.removesuffix('/storage/v1/')!r} if it persists)") from e
        except TimeoutError as e:  # asyncio's too; fsspec's sync() raises its FSTimeoutError, with no message
            raise TransientStoreError(f"GCS {what} {self._where(name)}: no answer within {self._timeout.total:g} s "
                                      "(network trouble; retryable)") from e
        except ClientError as e:  # aiohttp's own, its ClientOSError wrapping socket errors included
            raise TransientStoreError(f"GCS {what} {self._where(name)}: {type(e).__name__}: {e} "
                                      "(network trouble; retryable)") from e

    async def _send(self, method: str, url: str, params: dict, headers: dict | None,
                    data: bytes | None) -> tuple[int, Mapping[str, str], bytes]:
        if self._session is None:  # created on gcsfs's event loop, where every request runs
            self._session = aiohttp.ClientSession()
            weakref.finalize(self, _close_session, self.fs.loop, self._session)
        if self.fs.requester_pays:
            project = self.fs.requester_pays if isinstance(self.fs.requester_pays, str) else self.fs.project
            params = {**params, "userProject": project}
        headers = {"User-Agent": "stepgraph", **(headers or {})}
        # gcsfs has no public call that sends a request with ifGenerationMatch on a multipart upload,
        # nor one that hands out its auth header: its credentials object (what `token=` configured)
        # applies the bearer token, refreshed when due (nothing for "anon"). google-auth's public
        # Credentials.apply would need `token=` read a second time, possibly differently from gcsfs.
        self.fs.credentials.apply(headers)
        async with self._session.request(method, url, params=params, headers=headers, data=data,
                                         timeout=self._timeout) as response:
            return response.status, response.headers, await response.read()

    def _where(self, name: str) -> str:
        return f"gs://{self.location.bucket}/{name}"

    def _fail(self, what: str, name: str, status: int, body: bytes) -> NoReturn:
        message = _error_message(body)
        where = self._where(name)
        if status in _RETRYABLE_STATUS or status >= 500:
            raise TransientStoreError(f"GCS {what} {where}: HTTP {status} {message} (retryable)")
        if status in (401, 403):
            raise StoreError(f"GCS {what} {where}: HTTP {status} {message}: the credentials in the "
                             f"storage options (token=...) do not grant access to bucket "
                             f"{self.location.bucket!r}")
        if status == 404:
            raise StoreError(f"GCS {what} {where}: bucket {self.location.bucket!r} does not exist "
                             f"(create it or fix the prefix {self.root!r})")
        raise StoreError(f"GCS {what} {where}: HTTP {status} {message}")


def _close_session(loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
    """Close the session when its store goes away (not possible once the loop has stopped)."""
    if loop is not None and loop.is_running() and not session.closed:
        try:  # scheduled, not awaited: this may run on the loop's own thread
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(session.close()))
        except RuntimeError:  # the loop closed meanwhile (interpreter exit)
            pass


class _GlobRefused(Exception):
    """The server answered 400 to a listing with matchGlob."""


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        error = json.loads(text)["error"]
        return str(error.get("message", error) if isinstance(error, dict) else error)
    except (ValueError, KeyError, TypeError, AttributeError):
        return text[:200]


def _bucket_missing(body: bytes) -> bool:
    """A 404 that is about the bucket rather than the object (GCS says which in the message)."""
    message = _error_message(body).lower()
    return "bucket" in message and ("not exist" in message or "not found" in message)
