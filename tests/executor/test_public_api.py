"""The public surface of `executor` is exactly what its docstring lists: adding or removing a name
is a visible decision made here, and every exported name resolves."""

import executor
from executor.core.errors import ExecutorError

PUBLIC = {
    "ConfigEncodingError", "ExecutorError", "ExecutorStep", "GraphError", "Resources", "StatusError",
    "StoreError", "TransientStoreError", "execution_only", "executor_main", "map_shards",
    "output_of_tag", "output_path_of", "secret", "this_output_path",
    # the Python API (executor/api.py) that executor_main is built on
    "Options", "PlanResult", "RunResult", "StepFailed", "StepReport", "materialize", "plan", "run",
    "load_result",  # a succeeded step's returned value, dataclasses rebuilt
    "prefix_path",  # a fixed input under the prefix (Marin's InputName.hardcoded)
    "mirrored",  # a fixed input several buckets may hold, copied once under the prefix (issue 30)
    "register_encoding",  # how values of a library type become part of an id (issue 18)
    "open_file",  # a step's files on a disk or a bucket, with the run's storage options (issue 16)
    # a location is a value (issue 29): the step's storage options keyed by location, as a value
    "url_to_fs", "Location", "Storage", "current_storage",
    # what steps need, so that they import only this surface (tests/executor/test_layering.py)
    "Progress", "current_node", "hashed_unless_default",
    "claim_once", "ClaimSettings",  # shard work done once across runners, under a lease (issue 48)
    "cache_from_outputs",  # shard results under --cache-from prefixes (issue 48)
    "stored_checksum",  # a file's checksum as a bucket manifest records it: the shard forecast on buckets (issue 48)
}


def test_all_is_exactly_the_public_surface():
    assert set(executor.__all__) == PUBLIC
    assert len(executor.__all__) == len(PUBLIC), "a name is listed twice in __all__"


def test_every_public_name_resolves_and_is_documented():
    for name in executor.__all__:
        assert getattr(executor, name) is not None
        assert name in executor.__doc__, f"{name} is exported but not described in executor's docstring"


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from executor import *", namespace)
    assert {k for k in namespace if not k.startswith("__")} == PUBLIC


def test_exception_tree_as_documented():
    for name in ("ConfigEncodingError", "GraphError", "StatusError"):
        assert issubclass(getattr(executor, name), ExecutorError)
    assert issubclass(executor.TransientStoreError, executor.StoreError)
