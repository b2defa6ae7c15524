"""map_shards tasks on Ray: each gets the step's storage options as a value, and a shard request no
node can give fails at once. Apart from test_location.py because they start Ray: the location
mutation target runs its tests for each mutant, and these hold the runner's promise (ray_map.py)."""

from __future__ import annotations

import pytest

from executor.engine.prefix import location
from tests.buckets.conftest import make_bucket


def read_back(path: str) -> tuple[bytes, str]:
    """A shard function: reads an object with whatever options its step has."""
    with location.open_file(path, "rb") as f:
        return f.read(), location.current_storage().options_for(path).get("secret", "")


def test_map_shards_tasks_on_ray_get_the_step_s_options(ray_local, s3_emulator):
    from executor.engine.runner.ray_map import map_tasks

    bucket = make_bucket(s3_emulator, "shards")
    paths = [f"{bucket.prefix}/shard-{i}" for i in range(3)]
    with location.using(bucket.storage):  # the step that fans out
        for i, path in enumerate(paths):
            with location.open_file(path, "wb") as f:
                f.write(f"shard {i}".encode())
        results = map_tasks(read_back, paths)
    assert results == [(f"shard {i}".encode(), bucket.secret) for i in range(3)]


def test_a_shard_request_no_node_can_give_fails_at_once_naming_both(ray_local, ray_head):
    """The session head, ray_local's cluster, is one node of ray_head.num_cpus CPUs: shards asking for
    twice that would queue forever."""
    import time

    from executor.engine.runner.ray_map import ShardTaskDied, map_tasks

    has, asked = ray_head.num_cpus, 2 * ray_head.num_cpus
    started = time.monotonic()
    with pytest.raises(ShardTaskDied, match=rf"read_back: each shard task asks for {asked} CPU, but the largest "
                                            rf"live node of the cluster has {has}: no node can ever run it"):
        map_tasks(read_back, ["never-read"], num_cpus=asked)
    assert time.monotonic() - started < 60  # at once: not after unschedulable_timeout_s (120 s)
