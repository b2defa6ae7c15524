"""Where a run's outputs go: the prefix (given, env EXECUTOR_PREFIX, or the project's cache/), its storage
options (given, or env EXECUTOR_STORAGE_OPTIONS), and the coordination store and fsspec
filesystem they open. Read once per invocation by the API and handed inward.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from executor.core.errors import ExecutorError
from executor.engine import location, outputs
from executor.engine.store import open_store

DEFAULT_PREFIX = "cache"


def resolve_prefix(prefix: str | None, environ: Mapping[str, str], experiment_file: str | None = None) -> str:
    """The given prefix, else EXECUTOR_PREFIX, else cache/ in the project holding `experiment_file`
    (the nearest folder above it with a pyproject.toml or .git; see executor/engine/project.py)."""
    from executor.engine.project import default_prefix

    return outputs.normalize_prefix(prefix or environ.get("EXECUTOR_PREFIX") or default_prefix(experiment_file))


def storage_options_from_env(prefix: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The fsspec options for an object-store prefix, from EXECUTOR_STORAGE_OPTIONS (JSON)."""
    raw = environ.get("EXECUTOR_STORAGE_OPTIONS", "").strip()
    if not raw:
        return {}
    try:  # checked whatever the prefix: a malformed value is a mistake worth hearing about
        options = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ExecutorError(f"EXECUTOR_STORAGE_OPTIONS must be a JSON object: {e}") from None
    if not isinstance(options, dict):
        raise ExecutorError(f"EXECUTOR_STORAGE_OPTIONS must be a JSON object, not {type(options).__name__}")
    if outputs.is_local(prefix) or prefix.startswith("memory://"):
        return {}  # a local or memory:// prefix takes no options
    return options


def open_prefix(prefix: str, environ: Mapping[str, str], options: dict[str, Any]) -> tuple[Any, Any]:
    """The coordination store and the fsspec filesystem for a prefix, with storage options.

    Options for object stores (see storage_options_from_env) come from EXECUTOR_STORAGE_OPTIONS (a
    JSON object passed to gcsfs/s3fs, e.g. {"endpoint_url": "http://127.0.0.1:PORT", "token":
    "anon"}), never from a flag: argv is recorded in run files and options may hold secrets.
    Object stores are wrapped in RetryingStore (transient errors, lost answers of conditional
    writes).

    Test-only: EXECUTOR_FAULTY_STORE="RATE,SEED" wraps the store in FaultyStore (retryable
    errors at that seeded fraction of calls, half of them after the call took effect) under
    RetryingStore, for any prefix. Never set it outside tests.
    """
    from executor.engine.store.faulty import FaultyStore
    from executor.engine.store.retry import RetryingStore

    object_store = not (outputs.is_local(prefix) or prefix.startswith("memory://"))
    store = open_store(prefix, options)
    faulty = environ.get("EXECUTOR_FAULTY_STORE", "").strip()
    if faulty:
        try:
            rate, seed = faulty.split(",")
            store = FaultyStore(store, failure_rate=float(rate), seed=int(seed))
        except ValueError as e:
            raise ExecutorError(f"EXECUTOR_FAULTY_STORE (test-only) must be 'RATE,SEED': {e}") from None
    if object_store or faulty:
        store = RetryingStore(store)
    location.use_storage_options(prefix, options)
    return store, outputs.filesystem(prefix, options)
