"""The cache tests run experiments' command lines in this process (tests.tools.toy.run_file). The
command line owns its process's garbage collector (executor/engine/run/collector.py): a dry run leaves
it paused, as a process about to exit may. Each test here gives the collector back as it found it,
so a later module's check that the library leaves the collector alone sees the caller's state."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True)
def _collector_as_found():
    enabled = gc.isenabled()
    yield
    if enabled and not gc.isenabled():
        gc.enable()
