"""Where an object-store prefix points: `gs://bucket/path` or `s3://bucket/path` -> bucket + key names.

Shared by the GCS and S3 stores. (Filesystems for step data live in executor/engine/prefix/outputs.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

from executor.core.urls import split_url
from executor.engine.store.base import StoreError


@dataclass(frozen=True)
class BucketPrefix:
    """A bucket and the object-name prefix (no leading or trailing '/') that store keys live under."""

    scheme: str
    bucket: str
    path: str

    @classmethod
    def parse(cls, prefix: str, schemes: tuple[str, ...]) -> BucketPrefix:
        scheme, rest = split_url(prefix)
        if scheme not in schemes:
            raise StoreError(f"prefix {prefix!r} is not a {' or '.join(s + '://' for s in schemes)} URL")
        bucket, _, path = rest.partition("/")
        if not bucket:
            raise StoreError(f"prefix {prefix!r} names no bucket: use {schemes[0]}://BUCKET/optional/path")
        return cls(scheme, bucket, path.strip("/"))

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.path}" if self.path else "")

    def object_name(self, key: str) -> str:
        """The object name in the bucket for a store key."""
        key = key.lstrip("/")
        if not key:
            raise StoreError(f"empty key under {self.url}")
        return f"{self.path}/{key}" if self.path else key

    def list_prefix(self, key_prefix: str) -> str:
        """The object-name prefix to list for keys starting with `key_prefix` ('' = everything)."""
        key_prefix = key_prefix.lstrip("/")
        if not self.path:
            return key_prefix
        return f"{self.path}/{key_prefix}"

    def key_of(self, object_name: str) -> str:
        """The store key of an object name returned by a listing."""
        if not self.path:
            return object_name
        return object_name[len(self.path) + 1:]
