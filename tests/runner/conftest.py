"""A two-node cluster for the multi-host tests' modules (the one `ray start --head` cluster the
Ray tests share, `ray_head`, is tests/conftest.py's)."""

from __future__ import annotations

import pytest

from tests.runner.raycluster import start_nodes


@pytest.fixture(scope="module")
def two_nodes(monkeypatch_module):
    """This process connected to a real two-node cluster: a 2-host step runs with the placement
    users get, each host on its own node. Each node has room for two one-CPU hosts, so packing
    them onto one node would be possible (and seen by the tests). Both nodes are this machine and
    share its disk, as an NFS-backed cluster does (EXECUTOR_SHARED_FILESYSTEM=1: a local prefix)."""
    import ray

    monkeypatch_module.setenv("EXECUTOR_SHARED_FILESYSTEM", "1")
    cluster = start_nodes(2, cpus=2)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch
