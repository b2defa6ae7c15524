"""Where a run's outputs go: the prefix (given, env EXECUTOR_PREFIX, or the project's cache/), its storage
options (given, or env EXECUTOR_STORAGE_OPTIONS), and the coordination store and fsspec
filesystem they open. Read once per invocation by the API and handed inward.
"""

from __future__ import annotations

from typing import Any, Mapping

from executor.engine import location, outputs

DEFAULT_PREFIX = "cache"


def resolve_prefix(prefix: str | None, environ: Mapping[str, str], experiment_file: str | None = None) -> str:
    """The given prefix, else EXECUTOR_PREFIX, else cache/ in the project holding `experiment_file`
    (the nearest folder above it with a pyproject.toml or .git; see executor/engine/project.py)."""
    from executor.engine.project import default_prefix

    return outputs.normalize_prefix(prefix or environ.get("EXECUTOR_PREFIX") or default_prefix(experiment_file))


def storage_options_from_env(prefix: str, environ: Mapping[str, str], flag_value: str | None = None) -> dict[str, Any]:
    """The fsspec options for an object-store prefix: `--storage-options JSON` when given, else
    EXECUTOR_STORAGE_OPTIONS (both read by executor.engine.location). Malformed is an error
    whatever the prefix; a local or memory:// prefix takes none."""
    options = location.storage_options_from(flag_value, environ)
    if outputs.is_local(prefix) or prefix.startswith("memory://"):
        return {}
    return options


def open_prefix(prefix: str, environ: Mapping[str, str], options: dict[str, Any]) -> tuple[Any, Any]:
    """The coordination store (retrying, probed once) and the fsspec filesystem for a prefix, with
    its storage options registered for this process: executor.engine.location.open_location."""
    return location.open_location(prefix, options, environ=environ)
