"""Coordination stores chosen by the prefix's URL scheme: local, memory://, gs://, s3://."""

from __future__ import annotations

from executor.engine.store.base import CoordinationStore, StoreError, TransientStoreError, Versioned

__all__ = ["CoordinationStore", "StoreError", "TransientStoreError", "Versioned", "open_store"]


def open_store(prefix: str, storage_options: dict | None = None) -> CoordinationStore:
    """The coordination store for an executor prefix (a local path or a URL)."""
    scheme = prefix.split("://", 1)[0] if "://" in prefix else "file"
    options = dict(storage_options or {})
    if scheme in ("file", "local"):
        from executor.engine.store.local import LocalStore

        return LocalStore(prefix.split("://", 1)[-1])
    if scheme == "memory":
        from executor.engine.store.memory import MemoryStore

        return MemoryStore(prefix)
    if scheme in ("gs", "gcs"):
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
