"""Where a run's outputs go: the prefix (given, env EXECUTOR_PREFIX, or the project's cache/), the run's
storage options (given, or env EXECUTOR_STORAGE_OPTIONS) as a Storage value, and the coordination
store and fsspec filesystem they open. Read once per invocation by the API and handed inward.
"""

from __future__ import annotations

from typing import Any, Mapping

from executor.core.locations import Storage, storage_from
from executor.engine import location, outputs


def resolve_prefix(prefix: str | None, environ: Mapping[str, str], experiment_file: str | None = None) -> str:
    """The given prefix, else EXECUTOR_PREFIX, else cache/ in the project holding `experiment_file`
    (the nearest folder above it with a pyproject.toml or .git; see executor/engine/project.py)."""
    from executor.engine.project import default_prefix

    return outputs.normalize_prefix(prefix or environ.get("EXECUTOR_PREFIX") or default_prefix(experiment_file))


def storage_options_from_env(prefix: str, environ: Mapping[str, str], flag_value: str | None = None) -> Storage:
    """The run's storage options: `--storage-options JSON` when given, else EXECUTOR_STORAGE_OPTIONS
    (both read by executor.engine.location), as a Storage keyed by location. Malformed is an error
    whatever the prefix; one object of options applies to the prefix's protocol (to nothing for a
    local or memory:// prefix), an object keyed by location to every URL it covers."""
    return storage_from(location.storage_options_from(flag_value, environ), prefix)


def open_prefix(prefix: str, storage: Storage) -> tuple[Any, Any]:
    """The coordination store (retrying, probed) and the fsspec filesystem for a prefix, with the
    options `storage` has for it: executor.engine.location.open_location."""
    return location.open_location(prefix, storage)
