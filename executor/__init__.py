"""stepgraph's executor: a content-addressed step graph, planned, leased and run on Ray.

Public surface (tested in tests/executor/test_public_api.py):

    ExecutorStep, output_path_of, this_output_path   declare steps and their dependencies
    execution_only, secret, Resources                 fields outside identity; what a step needs
    executor_main                                     the CLI entry point of an experiment file
    map_shards                                        shard-level parallelism inside a step

Exceptions:

    ExecutorError                  anything the executor reports to the user (exit code 2)
    ├── ConfigEncodingError        a config value that cannot be hashed (names step and field)
    ├── GraphError                 cycles, unsafe names, two steps on one output path
    └── StatusError                a corrupt or too-new status file
    StoreError                     storage failed (TransientStoreError: retryable)
"""

from executor.cli import executor_main
from executor.core.errors import ConfigEncodingError, ExecutorError, GraphError, StatusError
from executor.engine.parallel import map_shards
from executor.core.step import (ExecutorStep, Resources, execution_only, output_path_of, secret,
                           this_output_path)
from executor.engine.store import StoreError, TransientStoreError

__all__ = [
    "ConfigEncodingError",
    "ExecutorError",
    "ExecutorStep",
    "GraphError",
    "Resources",
    "StatusError",
    "StoreError",
    "TransientStoreError",
    "execution_only",
    "executor_main",
    "map_shards",
    "output_path_of",
    "secret",
    "this_output_path",
]
