"""Where a run's outputs go: the prefix (given, env EXECUTOR_PREFIX, or the project's cache/), checked
for a mis-spelled scheme; the one check the read-only commands make that a prefix holds outputs; the
run's storage options (given, or env EXECUTOR_STORAGE_OPTIONS) as a Storage value, and the
coordination store and fsspec filesystem they open. Read once per invocation and handed inward.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from executor.core.errors import ExecutorError
from executor.core.locations import Storage, storage_from
from executor.core.urls import check_prefix_spelling
from executor.engine import location, outputs

if TYPE_CHECKING:
    from executor.engine.prefix_view import PrefixView

WHERE_FROM = "--prefix, or env EXECUTOR_PREFIX; the default is cache/ in the experiment's project"


def resolve_prefix(prefix: str | None, environ: Mapping[str, str], experiment_file: str | None = None) -> str:
    """The given prefix, else EXECUTOR_PREFIX, else cache/ in the project holding `experiment_file`
    (the nearest folder above it with a pyproject.toml or .git; see executor/engine/project.py),
    normalized; a mis-spelled URL (`gs:/bucket`) or an unknown scheme is an ExecutorError showing the
    right spelling. The one place the default prefix is chosen (runs, the API and every command)."""
    from executor.engine.project import default_prefix

    if prefix:
        source = "--prefix"
    elif environ.get("EXECUTOR_PREFIX"):
        prefix, source = environ["EXECUTOR_PREFIX"], "EXECUTOR_PREFIX"
    else:
        return outputs.normalize_prefix(default_prefix(experiment_file))
    check_prefix_spelling(prefix, source)
    return outputs.normalize_prefix(prefix)


def check_outputs(prefix: str, storage_options: Any = None) -> "PrefixView":
    """The read model of a prefix a read-only command reads, once it is known to hold step outputs or
    run files: a missing or empty prefix is most likely mistyped, and is one ExecutorError (exit 2)
    saying so and how to point at the right one. A missing local prefix is not created."""
    from executor.engine.prefix_view import PrefixView

    if outputs.is_local(prefix) and not os.path.isdir(prefix):
        raise ExecutorError(f"no stepgraph outputs under {prefix}: it does not exist; is the prefix right? "
                            f"({WHERE_FROM})")
    view = PrefixView.open(prefix, storage_options)
    if (_holds_a_status_file(prefix) if outputs.is_local(prefix) else view.list_steps()) or view.has_runs():
        return view
    raise ExecutorError(f"no stepgraph outputs under {prefix}: it holds no step outputs or run files; is the prefix "
                        f"right? ({WHERE_FROM})")


def _holds_a_status_file(directory: str) -> bool:
    """Whether a local prefix holds a step's status file: a walk that stops at the first one. A local
    listing reads (hashes) every status, which the command reads again next: not for a yes or no."""
    for where, subdirectories, files in os.walk(directory):
        if "status.json" in files and os.path.basename(where) == ".executor":
            return True
        subdirectories[:] = [d for d in subdirectories if d != "runs" or where != directory]  # run files: has_runs
    return False


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
