"""Where a run's outputs go: the prefix (given, env EXECUTOR_PREFIX, or the project's cache/), checked
for a mis-spelled scheme; the one check the read-only commands make that a prefix holds outputs; the
run's storage options (given, or env EXECUTOR_STORAGE_OPTIONS) as a Storage value, and the
coordination store and fsspec filesystem they open (`open_given`: the one place a run's prefix and storage
options are resolved). Read once per invocation and handed inward.

An opened prefix is a value, `OpenedPrefix`: its URL, its storage options, its coordination store
(probed once, when opened), its filesystem (opened on first use) and its read model (`view`). The
command line opens the prefix a command reads once (`open_prefix`) and every tool it calls takes
that value: no tool re-opens or re-probes the bucket.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping

from executor.core.errors import ExecutorError
from executor.core.locations import SOURCE, Storage, storage_from
from executor.core.urls import check_prefix_spelling
from executor.engine.prefix import location, outputs

if TYPE_CHECKING:
    from executor.engine.prefix.prefix_view import PrefixView

WHERE_FROM = "--prefix, or env EXECUTOR_PREFIX; the default is cache/ in the experiment's project"


def resolve_prefix(prefix: str | None, environ: Mapping[str, str], experiment_file: str | None = None) -> str:
    """The given prefix, else EXECUTOR_PREFIX, else cache/ in the project holding `experiment_file`
    (the nearest folder above it with a pyproject.toml or .git; see executor/engine/prefix/project.py),
    normalized; a mis-spelled URL (`gs:/bucket`) or an unknown scheme is an ExecutorError showing the
    right spelling. The one place the default prefix is chosen (runs, the API and every command)."""
    from executor.engine.prefix.project import default_prefix

    if prefix:
        source = "--prefix"
    elif environ.get("EXECUTOR_PREFIX"):
        prefix, source = environ["EXECUTOR_PREFIX"], "EXECUTOR_PREFIX"
    else:
        return outputs.normalize_prefix(default_prefix(experiment_file))
    check_prefix_spelling(prefix, source)
    return outputs.normalize_prefix(prefix)


@dataclass(frozen=True, eq=False)
class OpenedPrefix:
    """A prefix opened once (see the module docstring): pass it, never its URL and options, to a tool."""

    url: str  # normalized (executor.engine.prefix.outputs.normalize_prefix)
    storage: Storage  # the options of every location the command touches, keyed by location
    store: Any  # its CoordinationStore (retrying, probed when opened)
    fs: Any  # its fsspec filesystem (a DeferredFilesystem: opened on first use)
    given: Any = None  # the options as given (one object applies to each location's own protocol)

    @cached_property
    def view(self) -> "PrefixView":
        """The read model of the prefix, over this store."""
        from executor.engine.prefix.prefix_view import PrefixView

        return PrefixView(self.store, self.url)

    @property
    def filesystem(self) -> Any:
        """The real fsspec filesystem (opened now if not yet)."""
        return location.opened(self.fs)

    def locate(self, path: str) -> tuple["PrefixView", str]:
        """The read model holding the output directory `path`, and its rel there: this prefix's own
        view when `path` is under the prefix, else its parent folder's, opened with the same options
        (a step given by a path elsewhere)."""
        from executor.engine.prefix.prefix_view import PrefixView

        path, root = path.rstrip("/"), self.url.rstrip("/")
        if path.startswith(root + "/"):
            return self.view, path[len(root) + 1:]
        parent, _, name = path.rpartition("/")
        return PrefixView.open(parent or "/", self.options_for_elsewhere), name

    @property
    def options_for_elsewhere(self) -> Any:
        """The options to open another location with: as given (one object of options applies to
        each location's own protocol), else this prefix's Storage (keyed by location)."""
        return self.given if self.given is not None else self.storage

    def __repr__(self) -> str:  # the options may hold credentials
        return f"OpenedPrefix({self.url!r})"


def open_prefix(prefix: str, storage: Storage | Mapping[str, Any] | None = None, *,
                source: str = SOURCE) -> OpenedPrefix:
    """The prefix opened once: its coordination store (retrying, probed) and fsspec filesystem with
    the options `storage` has for it (a Storage, or options as `storage_from` takes them; `source`
    names them in its errors)."""
    given = None if isinstance(storage, Storage) else storage
    storage = storage_from(storage, prefix, source=source)
    store, fs = location.open_location(prefix, storage)
    return OpenedPrefix(prefix, storage, store, fs, given)


def open_given(prefix: str | None, environ: Mapping[str, str], main_file: str | None = None, *,
               flag: str | None = None, storage: Any = None) -> OpenedPrefix:
    """A run's prefix and its storage options, resolved and opened in one place, once per call: the
    prefix as `resolve_prefix` chooses it; the options from `--storage-options` JSON (`flag`), else the
    object a library caller gave (`storage`: Options(storage_options=...)), else env
    EXECUTOR_STORAGE_OPTIONS; read once, made a Storage once. The command line calls it once per
    invocation (executor.cli), the API once per call not given an OpenedPrefix (executor.api); what it
    returns goes down as it is, to the run loop and each step's call."""
    url = resolve_prefix(prefix, environ, main_file)
    if flag is not None:
        given, source = location.storage_json(flag, location.FLAG), location.FLAG
    elif storage is not None:
        given, source = storage, "Options(storage_options=...)"
    else:
        given, source = location.storage_json(environ.get(location.ENV_VAR), location.ENV_VAR), location.ENV_VAR
    return open_prefix(url, given, source=source)


def open_outputs(prefix: str | None, storage: Any, environ: Mapping[str, str]) -> OpenedPrefix:
    """The prefix a read-only command reads (resolve_prefix: `prefix`, else EXECUTOR_PREFIX, else
    cache/), opened once and checked to hold outputs (check_outputs: the one answer otherwise)."""
    opened = open_prefix(resolve_prefix(prefix, environ), storage)
    check_outputs(opened)
    return opened


def check_outputs(opened: OpenedPrefix) -> "PrefixView":
    """The read model of an opened prefix a read-only command reads, once it is known to hold step
    outputs or run files: a missing or empty prefix is most likely mistyped, and is one ExecutorError
    (exit 2) saying so and how to point at the right one. A missing local prefix is not created."""
    prefix = opened.url
    if outputs.is_local(prefix) and not os.path.isdir(prefix):
        raise ExecutorError(f"no stepgraph outputs under {prefix}: it does not exist; is the prefix right? "
                            f"({WHERE_FROM})")
    view = opened.view
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
