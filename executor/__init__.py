"""stepgraph's executor: a content-addressed step graph, planned, leased and run on Ray.

Public surface (tested in tests/executor/test_public_api.py):

    ExecutorStep, output_path_of, this_output_path   declare steps and their dependencies
    prefix_path                                       a fixed input under the prefix, not a step's output
    register_encoding                                 how values of a library type become part of an id
    execution_only, secret, Resources                 fields outside identity; what a step needs
    executor_main                                     the CLI entry point of an experiment file
    plan, run, materialize, Options                   the Python API executor_main is built on
    load_result                                       what a succeeded step returned (dataclasses rebuilt)
    PlanResult, RunResult, StepReport                 what they return: per step path, decision, status
    map_shards                                        shard-level parallelism inside a step
    open_file, url_to_fs                              open a path or gs:// / s3:// URL with the step's storage options
    Location, Storage, current_storage                a URL with its options; a run's options keyed by location

Exceptions:

    ExecutorError                  anything the executor reports to the user (exit code 2)
    ├── ConfigEncodingError        a config value that cannot be hashed (names step and field)
    ├── GraphError                 cycles, unsafe names, two steps on one output path
    └── StatusError                a corrupt or too-new status file
    StoreError                     storage failed (TransientStoreError: retryable)
    StepFailed                     from materialize / RunResult.raise_on_failure: a step did not succeed
"""

from executor.api import (Options, PlanResult, RunResult, StepFailed, StepReport, load_result, materialize,
                          plan, run)
from executor.cli import executor_main
from executor.core.encodings import register_encoding
from executor.core.errors import ConfigEncodingError, ExecutorError, GraphError, StatusError
from executor.core.locations import Location, Storage
from executor.engine.location import current_storage, open_file, url_to_fs
from executor.engine.parallel import map_shards
from executor.core.step import (ExecutorStep, Resources, execution_only, output_path_of, prefix_path, secret,
                                this_output_path)
from executor.engine.store import StoreError, TransientStoreError

__all__ = [
    "ConfigEncodingError",
    "ExecutorError",
    "ExecutorStep",
    "GraphError",
    "Location",
    "Options",
    "PlanResult",
    "Resources",
    "RunResult",
    "StatusError",
    "StepFailed",
    "StepReport",
    "Storage",
    "StoreError",
    "TransientStoreError",
    "current_storage",
    "execution_only",
    "executor_main",
    "load_result",
    "map_shards",
    "materialize",
    "open_file",
    "output_path_of",
    "plan",
    "prefix_path",
    "register_encoding",
    "run",
    "secret",
    "this_output_path",
    "url_to_fs",
]
