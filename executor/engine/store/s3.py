"""Amazon S3 (and compatible) coordination store: ETags as generations, conditional PutObject.

Create is `PutObject If-None-Match: *`, compare-and-swap is `PutObject If-Match: <etag>`; S3 answers
412 (or 409 ConditionalRequestConflict) to the loser. The ETag of a simple upload is the MD5 of
its bytes, so rewriting identical bytes keeps the generation: status objects carry a sequence
number bumped on every write for that reason. Each call is one request on s3fs's aiobotocore
client with botocore's retries turned off (a retried conditional write whose response was lost
reports a race lost that we won); retrying is RetryingStore's job.

Storage options go to s3fs.S3FileSystem (`endpoint_url`, `key`, `secret`, `client_kwargs`, ...).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator, NoReturn, Sequence

import aiohttp
import botocore.exceptions
import s3fs
from botocore.exceptions import EndpointConnectionError  # a plain name in except clauses: cosmic-ray mutates those only
from fsspec.asyn import sync

from executor.engine.store.base import READ_PARALLELISM, StoreError, TransientStoreError, Versioned, read_concurrently
from executor.engine.store.fs import BucketPrefix

_RETRYABLE_STATUS = frozenset({408, 429})  # and every 5xx
_RETRYABLE_CODES = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable",
                              "Throttling", "ThrottlingException", "RequestTimeTooSkewed"})
_LOST_RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_NETWORK_ERRORS = (botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError,
                   aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, ConnectionError)
_PAGE_SIZE = 1000


class S3Store:
    """Coordination objects under `s3://bucket/path`; storage options go to s3fs.S3FileSystem."""

    def __init__(self, prefix: str, **storage_options: Any):
        self.location = BucketPrefix.parse(prefix, ("s3", "s3a"))
        self.root = self.location.url
        options = dict(storage_options)
        config = dict(options.pop("config_kwargs", None) or {})
        config["retries"] = {"total_max_attempts": 1}  # one request per call: see the module doc
        self.fs = s3fs.S3FileSystem(config_kwargs=config, **options)
        self._client_lock = threading.Lock()
        self._client: Any = None

    # -- the protocol -------------------------------------------------------------------------

    def read(self, key: str) -> Versioned | None:
        name = self.location.object_name(key)

        async def get() -> Versioned:
            response = await (await self._s3()).get_object(Bucket=self.location.bucket, Key=name)
            body = response["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
            return Versioned(data, response["ETag"])

        try:
            return self._run("read", name, get)
        except botocore.exceptions.ClientError as e:
            if _object_absent(e):
                return None
            self._fail("read", name, e)

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        """read() of each key, READ_PARALLELISM requests in flight (one request per key)."""
        return read_concurrently(self.read, keys, READ_PARALLELISM)

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        return self._put("create", key, data, IfNoneMatch="*")

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        return self._put("replace", key, data, IfMatch=generation)

    def delete(self, key: str) -> None:
        name = self.location.object_name(key)

        async def delete() -> None:
            await (await self._s3()).delete_object(Bucket=self.location.bucket, Key=name)

        try:
            self._run("delete", name, delete)
        except botocore.exceptions.ClientError as e:
            if not _object_absent(e):  # S3 deletes a missing key with 204; some servers answer 404
                self._fail("delete", name, e)

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        """One ListObjectsV2 listing, 1,000 keys a page (S3 cannot filter by suffix server-side)."""
        list_prefix = self.location.list_prefix(prefix)

        async def list_all() -> dict[str, str]:
            client = await self._s3()
            found: dict[str, str] = {}
            kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": list_prefix,
                                      "MaxKeys": _PAGE_SIZE}
            while True:
                page = await client.list_objects_v2(**kwargs)
                for item in page.get("Contents", []):
                    if item["Key"].endswith(suffix):
                        found[self.location.key_of(item["Key"])] = item["ETag"]
                if not page.get("IsTruncated"):
                    return found
                kwargs["ContinuationToken"] = page["NextContinuationToken"]

        try:
            return self._run("list", list_prefix + "*", list_all)
        except botocore.exceptions.ClientError as e:
            self._fail("list", list_prefix + "*", e)

    # -- one request --------------------------------------------------------------------------

    def _put(self, what: str, key: str, data: bytes, **condition: str) -> str | None:
        name = self.location.object_name(key)

        async def put() -> str:
            response = await (await self._s3()).put_object(
                Bucket=self.location.bucket, Key=name, Body=bytes(data), **condition)
            return response["ETag"]

        try:
            return self._run(what, name, put)
        except botocore.exceptions.ClientError as e:
            if _code(e) in _LOST_RACE_CODES or _status(e) == 412:
                return None
            if what == "replace" and _code(e) == "NoSuchKey":
                return None  # nothing to replace: no generation can match
            self._fail(what, name, e)

    async def _s3(self) -> Any:
        if self._client is None:
            self._client = await self.fs.set_session()
        return self._client

    def _run(self, what: str, name: str, call: Any) -> Any:
        try:
            if self._client is None:
                with self._client_lock:  # create the client once, not once per thread
                    sync(self.fs.loop, self._s3)
            return sync(self.fs.loop, call)
        except botocore.exceptions.ClientError:
            raise
        except EndpointConnectionError as e:  # refused, or no such host: as a wrong endpoint_url is
            raise TransientStoreError(f"S3 {what} {self._where(name)}: {e} (retryable; check "
                                      f"endpoint_url={self._client.meta.endpoint_url!r} if it persists)") from e
        except _NETWORK_ERRORS as e:
            raise TransientStoreError(f"S3 {what} {self._where(name)}: {type(e).__name__}: {e} "
                                      "(network trouble; retryable)") from e
        except botocore.exceptions.NoCredentialsError as e:
            raise StoreError(f"S3 {what} {self._where(name)}: no credentials: pass key=/secret= in "
                             "the storage options or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") from e
        except botocore.exceptions.BotoCoreError as e:
            raise StoreError(f"S3 {what} {self._where(name)}: {type(e).__name__}: {e}") from e

    def _where(self, name: str) -> str:
        return f"s3://{self.location.bucket}/{name}"

    def _fail(self, what: str, name: str, e: botocore.exceptions.ClientError) -> NoReturn:
        status, code = _status(e), _code(e)
        message = e.response.get("Error", {}).get("Message", "")
        where = self._where(name)
        if status in _RETRYABLE_STATUS or status >= 500 or code in _RETRYABLE_CODES:
            raise TransientStoreError(f"S3 {what} {where}: HTTP {status} {code}: {message} (retryable)") from e
        if code == "NoSuchBucket":
            raise StoreError(f"S3 {what} {where}: bucket {self.location.bucket!r} does not exist "
                             f"(create it or fix the prefix {self.root!r})") from e
        if status in (401, 403):
            raise StoreError(f"S3 {what} {where}: HTTP {status} {code}: the credentials in the storage "
                             f"options do not grant access to bucket {self.location.bucket!r}") from e
        raise StoreError(f"S3 {what} {where}: HTTP {status} {code}: {message}") from e


def _status(e: botocore.exceptions.ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _object_absent(e: botocore.exceptions.ClientError) -> bool:
    """The object is not there (the bucket is): NoSuchKey, or a 404 with no code saying otherwise."""
    return _code(e) == "NoSuchKey" or (_status(e) == 404 and _code(e) != "NoSuchBucket")


def _code(e: botocore.exceptions.ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))
