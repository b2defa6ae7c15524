"""stepgraph's executor: a content-addressed step graph, planned, leased and run on Ray.

Public surface (tested in tests/executor/test_public_api.py):

    ExecutorStep, output_path_of, this_output_path   declare steps and their dependencies
    prefix_path                                       a fixed input under the prefix, not a step's output
    output_of_tag                                     the output a tag (name@version) points at (docs/tags.md)
    mirrored                                          a fixed input that several buckets may hold (--mirror-sources)
    register_encoding                                 how values of a library type become part of an id
    execution_only, secret, Resources                 fields outside identity; what a step needs
    hashed_unless_default                             a hashed field added later: out of the id while at its default
    executor_main                                     the CLI entry point of an experiment file
    plan, run, materialize, Options                   the Python API executor_main is built on
    load_result                                       what a succeeded step returned (dataclasses rebuilt)
    PlanResult, RunResult, StepReport                 what they return: per step path, decision, status
    map_shards                                        shard-level parallelism inside a step
    claim_once, ClaimSettings                         work inside a step done once across runners (a lease)
    cache_from_outputs                                a step's outputs under the run's --cache-from prefixes
    stored_checksum                                   a file's checksum as the store keeps it (what a bucket manifest records)
    current_node                                      the node a step's code runs on (Ray node id, else the host name)
    Progress                                          progress lines (count, rate, ETA) for long work inside a step
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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and the module that defines it. They load on first use (PEP 562), so a Ray
# worker importing the step-running modules, or a step importing `map_shards`, does not import
# the command line, the Python API or the flags parser (tests/executor/test_lazy_import.py).
_HOME = {
    **dict.fromkeys(("Options", "PlanResult", "RunResult", "StepFailed", "StepReport", "load_result",
                     "materialize", "plan", "run"), "executor.api"),
    "executor_main": "executor.cli",
    "register_encoding": "executor.core.encodings",
    **dict.fromkeys(("ConfigEncodingError", "ExecutorError", "GraphError", "StatusError"), "executor.core.errors"),
    **dict.fromkeys(("Location", "Storage"), "executor.core.locations"),
    **dict.fromkeys(("current_storage", "open_file", "url_to_fs"), "executor.engine.prefix.location"),
    "map_shards": "executor.engine.worker.parallel",
    **dict.fromkeys(("ClaimSettings", "claim_once"), "executor.engine.worker.claims"),
    "cache_from_outputs": "executor.engine.worker.shard_sources",
    "stored_checksum": "executor.engine.prefix.outputs",
    "current_node": "executor.engine.runner.here",
    "Progress": "executor.engine.worker.progress",
    **dict.fromkeys(("ExecutorStep", "Resources", "execution_only", "hashed_unless_default", "mirrored",
                     "output_of_tag", "output_path_of", "prefix_path", "secret", "this_output_path"), "executor.core.step"),
    **dict.fromkeys(("StoreError", "TransientStoreError"), "executor.engine.store"),
}

if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from executor.api import (Options, PlanResult, RunResult, StepFailed, StepReport, load_result, materialize,
                              plan, run)
    from executor.cli import executor_main
    from executor.core.encodings import register_encoding
    from executor.core.errors import ConfigEncodingError, ExecutorError, GraphError, StatusError
    from executor.core.locations import Location, Storage
    from executor.core.step import (ExecutorStep, Resources, execution_only, hashed_unless_default, mirrored,
                                    output_of_tag, output_path_of, prefix_path, secret, this_output_path)
    from executor.engine.prefix.location import current_storage, open_file, url_to_fs
    from executor.engine.worker.claims import ClaimSettings, claim_once
    from executor.engine.worker.shard_sources import cache_from_outputs
    from executor.engine.prefix.outputs import stored_checksum
    from executor.engine.worker.parallel import map_shards
    from executor.engine.worker.progress import Progress
    from executor.engine.runner.here import current_node
    from executor.engine.store import StoreError, TransientStoreError


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'executor' has no attribute {name!r}")
    from executor.core.gc_pause import gc_paused

    with gc_paused():  # an import after 100,000 steps were declared would rescan them all (0.4 s of CPU)
        value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ClaimSettings",
    "ConfigEncodingError",
    "ExecutorError",
    "ExecutorStep",
    "GraphError",
    "Location",
    "Options",
    "Progress",
    "PlanResult",
    "Resources",
    "RunResult",
    "StatusError",
    "StepFailed",
    "StepReport",
    "Storage",
    "StoreError",
    "TransientStoreError",
    "cache_from_outputs",
    "claim_once",
    "current_node",
    "current_storage",
    "execution_only",
    "executor_main",
    "hashed_unless_default",
    "load_result",
    "map_shards",
    "materialize",
    "mirrored",
    "open_file",
    "output_of_tag",
    "output_path_of",
    "plan",
    "prefix_path",
    "register_encoding",
    "run",
    "secret",
    "stored_checksum",
    "this_output_path",
    "url_to_fs",
]
