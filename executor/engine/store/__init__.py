"""Coordination stores chosen by the prefix's URL scheme: local, memory://, gs://, s3://."""

from __future__ import annotations

from executor.core.urls import canonical, protocol_of
from executor.engine.store.base import CoordinationStore, StoreError, TransientStoreError, Versioned

__all__ = ["CoordinationStore", "StoreError", "TransientStoreError", "Versioned", "open_store"]


def open_store(prefix: str, storage_options: dict | None = None) -> CoordinationStore:
    """The coordination store for an executor prefix (a local path or a URL; scheme aliases such as
    `gcs://` and `s3a://` as executor.core.urls reads them)."""
    scheme, prefix = protocol_of(prefix), canonical(prefix)
    options = dict(storage_options or {})
    if scheme == "file":
        from executor.engine.store.local import LocalStore

        return LocalStore(prefix)
    if scheme == "memory":
        from executor.engine.store.memory import MemoryStore

        return MemoryStore(prefix)
    if scheme == "gs":
        try:
            from executor.engine.store.gcs import GCSStore
        except ImportError as e:
            raise StoreError(f"prefix {prefix!r} needs gcsfs: install it with `uv add gcsfs` ({e})") from e
        return GCSStore(prefix, **options)
    if scheme == "s3":
        try:
            from executor.engine.store.s3 import S3Store
        except ImportError as e:
            raise StoreError(f"prefix {prefix!r} needs s3fs: install it with `uv add s3fs` ({e})") from e
        return S3Store(prefix, **options)
    raise StoreError(f"prefix {prefix!r}: unsupported storage scheme {scheme!r} (use a local path, memory://, gs:// or s3://)")
