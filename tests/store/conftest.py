"""Stores under test: one fresh, isolated store per test for each backend (local, memory, GCS, S3)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures, started on first use)
from executor.engine.store import CoordinationStore, open_store

BACKENDS = ("local", "memory", "gcs", "s3")


@dataclass(frozen=True)
class StoreLocation:
    """Where a test's store lives; `open()` makes another client of the same objects."""

    backend: str
    prefix: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> CoordinationStore:
        return open_store(self.prefix, self.storage_options)


@pytest.fixture(params=BACKENDS)
def store_location(request, tmp_path) -> StoreLocation:
    backend = request.param
    if backend == "local":
        return StoreLocation(backend, str(tmp_path / "store"))
    if backend == "memory":
        return StoreLocation(backend, f"memory://store-test-{uuid.uuid4().hex[:12]}")
    emulator = request.getfixturevalue("gcs_emulator" if backend == "gcs" else "s3_emulator")
    return StoreLocation(backend, emulator.fresh_prefix("store"), dict(emulator.storage_options))


@pytest.fixture
def store(store_location) -> CoordinationStore:
    return store_location.open()
