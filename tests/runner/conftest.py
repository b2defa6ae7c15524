"""One real `ray start --head` cluster shared by this directory's Ray tests, and a two-node cluster
for the multi-host tests' modules."""

from __future__ import annotations

import pytest

from tests.runner.raycluster import RayHead, start_nodes


@pytest.fixture(scope="session")
def ray_head():
    """A head started from its own directory and environment, with a custom resource `special`
    (routing)."""
    head = RayHead(num_cpus=4, resources='{"special": 1}')
    try:
        head.start()
    except RuntimeError as e:
        head.stop()
        pytest.fail(f"could not start a Ray head for the tests: {e}")
    yield head
    head.stop()


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
