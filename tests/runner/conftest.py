"""One real `ray start --head` cluster shared by this directory's Ray tests."""

from __future__ import annotations

import pytest

from tests.runner.raycluster import RayHead


@pytest.fixture(scope="session")
def ray_head():
    """A head started from its own directory and environment, with custom resources:
    `special` (routing) and two `host_slot`s (a 2-host step packed onto this one machine)."""
    head = RayHead(num_cpus=4, resources='{"special": 1, "host_slot": 2}')
    try:
        head.start()
    except RuntimeError as e:
        head.stop()
        pytest.fail(f"could not start a Ray head for the tests: {e}")
    yield head
    head.stop()
