"""executor.engine.prefix.location: how storage options are read, carried to a step's worker as a value,
and kept out of reprs and recorded command lines (on Ray's shard tasks: test_shard_tasks_on_ray.py)."""

from __future__ import annotations

import pickle

import pytest

from executor.core.errors import ExecutorError
from executor.core.locations import Storage
from executor.engine.prefix import location
from executor.engine.runner.base import StepCall


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


@pytest.mark.parametrize("prefix, parts, joined", [
    ("/tmp/p", ("a/s-0123",), "/tmp/p/a/s-0123"),
    ("gs://b/x/", ("/y/", None, "z"), "gs://b/x/y/z"),  # one '/' between parts; None and "" left out
    ("s3://b", ("", "runs/x.json"), "s3://b/runs/x.json"),
    ("/", ("x",), "/x"),
    ("p", (), "p"),
])
def test_outputs_join_puts_one_slash_between_parts_and_skips_empty_ones(prefix, parts, joined):
    from executor.engine.prefix import outputs

    assert outputs.join(prefix, *parts) == joined
