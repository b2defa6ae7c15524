from __future__ import annotations

from pathlib import Path

import pytest

from tests.emulators import s3_emulator  # noqa: F401  (session fixture)
from tests.leases.harness import make_backend


@pytest.fixture
def backend(request, tmp_path):
    """Parametrize indirectly with "local" / "s3" (an S3 run costs ~20 s on a loaded 2-core machine,
    so only the endings where the backend matters run on both)."""
    return make_backend(request.param, tmp_path, request)


# s3 in the slow pass: the same proof runs on local disk in the default suite, and test_sigterm_on_s3
# keeps one ending on S3 there
BOTH = pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.slow)], indirect=True)


@pytest.fixture
def local(request, tmp_path):
    return make_backend("local", tmp_path, request)


@pytest.fixture
def sidefx(tmp_path) -> Path:
    path = tmp_path / "sidefx"
    path.mkdir()
    return path
