"""Fixtures for the tool tests: the toy experiment (fresh, or already run once) and the S3 and GCS emulators."""

from __future__ import annotations

import pytest

try:  # the same module object tests/store uses, so the session shares one emulator
    from emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures, started on first use)
except ImportError:
    from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401

from .toy import Toy


@pytest.fixture
def toy(tmp_path) -> Toy:
    return Toy(tmp_path)


@pytest.fixture
def ran_toy(toy) -> Toy:
    code, out = toy.run("--runner", "inline")
    assert code == 0, out
    return toy
