"""The public surface of `executor` is exactly __all__, and every name in it is importable."""

import executor


def test_all_is_the_public_surface():
    assert sorted(executor.__all__) == [
        "ConfigEncodingError", "ExecutorError", "ExecutorStep", "GraphError", "Options", "PlanResult",
        "Resources", "RunResult", "StatusError", "StepFailed", "StepReport", "StoreError",
        "TransientStoreError", "execution_only", "executor_main", "load_result", "map_shards", "materialize",
        "output_path_of", "plan", "prefix_path", "run", "secret", "this_output_path"]
    for name in executor.__all__:
        assert getattr(executor, name) is not None
