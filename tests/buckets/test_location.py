"""executor.engine.location: how storage options are read, carried to Ray workers and shard tasks
as a value, and kept out of reprs and recorded command lines."""

from __future__ import annotations

import pickle

import pytest

from executor.core.errors import ExecutorError
from executor.core.locations import Storage
from executor.engine import location
from executor.engine.runner.base import StepCall
from tests.buckets.conftest import make_bucket


def test_the_flag_wins_over_the_variable_and_both_must_be_json_objects():
    env = {"EXECUTOR_STORAGE_OPTIONS": '{"endpoint_url": "http://env"}'}
    assert location.storage_options_from(None, env) == {"endpoint_url": "http://env"}
    assert location.storage_options_from('{"endpoint_url": "http://flag"}', env) == {"endpoint_url": "http://flag"}
    with pytest.raises(ExecutorError, match="--storage-options must be a JSON object"):
        location.storage_options_from("{nope", env)
    with pytest.raises(ExecutorError, match="EXECUTOR_STORAGE_OPTIONS must be a JSON object, not list"):
        location.storage_options_from(None, {"EXECUTOR_STORAGE_OPTIONS": "[]"})


def test_the_flag_is_taken_out_of_argv_and_its_value_never_recorded():
    for argv in (["--prefix", "s3://b", "--storage-options", '{"secret": "S"}', "--dry-run"],
                 ["--prefix", "s3://b", '--storage_options={"secret": "S"}', "--dry-run"]):
        value, rest = location.pop_storage_options_flag(argv)
        assert value == '{"secret": "S"}' and rest == ["--prefix", "s3://b", "--dry-run"]
        assert "S" not in " ".join(location.redact_argv(argv)).replace("s3", "")
    with pytest.raises(ExecutorError, match="needs a JSON object"):
        location.pop_storage_options_flag(["--storage-options"])


def test_a_step_call_carries_the_options_without_showing_them():
    storage = Storage({"s3://bucket": {"key": "AKIA-SHOWN-NOWHERE", "secret": "sk-shown-nowhere"}})
    call = StepCall("a-123", print, {"output_path": "s3://bucket/x/a-123"}, "s3://bucket/x/a-123", storage=storage)
    for text in (repr(call), str(call), repr(call.storage), str(call.storage), repr(storage.location("s3://bucket/k"))):
        assert "shown-nowhere" not in text.lower()
    travelled = pickle.loads(pickle.dumps(call))
    assert location.current_storage().options_for("s3://bucket/y") == {}  # outside a step: none
    with location.using(travelled.storage):  # what a worker does around the step
        assert location.current_storage().options_for("s3://bucket/y")["secret"] == "sk-shown-nowhere"
    assert location.current_storage().options_for("s3://bucket/y") == {}


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


def test_a_shard_request_no_node_can_give_fails_at_once_naming_both(ray_local):
    """ray_local's one node has 2 CPUs: shards asking for 4 would queue forever."""
    import time

    from executor.engine.runner.ray_map import ShardTaskDied, map_tasks

    started = time.monotonic()
    with pytest.raises(ShardTaskDied, match=r"read_back: each shard task asks for 4 CPU, but the largest live "
                                            r"node of the cluster has 2: no node can ever run it"):
        map_tasks(read_back, ["never-read"], num_cpus=4)
    assert time.monotonic() - started < 60  # at once: not after unschedulable_timeout_s (120 s)


@pytest.mark.parametrize("prefix, parts, joined", [
    ("/tmp/p", ("a/s-0123",), "/tmp/p/a/s-0123"),
    ("gs://b/x/", ("/y/", None, "z"), "gs://b/x/y/z"),  # one '/' between parts; None and "" left out
    ("s3://b", ("", "runs/x.json"), "s3://b/runs/x.json"),
    ("/", ("x",), "/x"),
    ("p", (), "p"),
])
def test_outputs_join_puts_one_slash_between_parts_and_skips_empty_ones(prefix, parts, joined):
    from executor.engine import outputs

    assert outputs.join(prefix, *parts) == joined
