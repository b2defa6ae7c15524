"""stepgraph's executor: a content-addressed step graph, planned, leased and run on Ray.

Public surface (tested in tests/test_public_api.py):

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
