"""Opening locations: a path or URL plus the storage options that apply to it (executor.core.locations).

A run's options are a `Storage` value (keyed by location, longest match wins), built once per call
from `--storage-options JSON`, EXECUTOR_STORAGE_OPTIONS or `Options(storage_options=...)` and handed
inward as an argument: `open_location(prefix, storage)` gives the coordination store (retrying,
probed once per call) and the prefix's fsspec filesystem; `url_to_fs(url, storage)` and
`open_file(url, storage=...)` open any other URL a run touches (inputs, fixed paths). Nothing is
kept at module level: two runs in one process, with different options, never see each other's.

How a step gets its options: the executor puts the run's `Storage` in each step's call
(`StepCall.storage`, hidden from every repr, never recorded); the worker that runs the call (Ray
task, forked child, thread) makes it the step's storage with `using(call.storage)` around the step
function, and so does each `map_shards` task. Inside, `executor.open_file(url)` /
`executor.url_to_fs(url)` read it with `current_storage()`. The carrier is a
`contextvars.ContextVar`, not a module dict, because a step function's signature is `fn(config)`
(user code: the options cannot join the config, which is hashed and recorded, nor a new argument
without breaking every step), and a context variable is per thread and per task: two runs' steps
on two threads of one process each see their own `Storage`, and code outside a step sees none.
A step that starts threads of its own hands them `current_storage()` (or runs them in
`contextvars.copy_context()`), as it would any context.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import re
import threading
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:  # imported where used: importing fsspec costs a tenth of a second a no-op run never needs
    import fsspec

from executor.core.errors import ExecutorError
from executor.core.locations import NO_STORAGE_OPTIONS, Location, Storage, storage_from
from executor.core.urls import OBJECT_STORES, is_object_store, split_url
from executor.engine.store import CoordinationStore, StoreError, TransientStoreError, open_store as open_raw_store

ENV_VAR = "EXECUTOR_STORAGE_OPTIONS"
FLAG = "--storage-options"
PROBE_KEY = ".executor-reachability-probe"  # listed (never written) to check a bucket answers
PROBE_ATTEMPTS, PROBE_BUDGET_S, PROBE_DEADLINE_S = 3, 4.0, 10.0  # a first listing: tries, retry budget, wait
_FLAG_NAMES = ("--storage-options", "--storage_options")
_FIX = f"Fix the keys in {FLAG} / {ENV_VAR} (see the gcsfs / s3fs documentation)"

# The Storage of the step running in this thread / task (see the module docstring); none outside one.
_step_storage: contextvars.ContextVar[Storage] = contextvars.ContextVar("stepgraph_step_storage",
                                                                        default=NO_STORAGE_OPTIONS)


# -- which options: parsing the flag and the variable ----------------------------------------------

def parse_storage_options(text: str | None, source: str) -> dict[str, Any]:
    """A JSON object from the flag or the variable (one object of options, or one per location),
    checked before any prefix is known (the commands); anything else is a one-line usage error naming
    the source, the key and how to fix it."""
    value = storage_json(text, source)
    storage_from(value, None, source=source)  # a malformed map is refused here, before anything opens
    return value


def storage_json(text: str | None, source: str) -> dict[str, Any]:
    """The JSON object of the flag or the variable, read (not yet checked as options: storage_from
    does that, once, when it makes the Storage); not an object is a one-line usage error."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ExecutorError(f"{source} must be a JSON object such as '{{\"endpoint_url\": "
                            f"\"http://127.0.0.1:9000\"}}' or one object per location such as "
                            f"'{{\"s3://corpus\": {{...}}, \"gs://\": {{...}}}}': {e}") from None
    if not isinstance(value, dict):
        raise ExecutorError(f"{source} must be a JSON object, not {type(value).__name__}")
    return value


def storage_options_from(flag_value: str | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """The flag's options if given, else EXECUTOR_STORAGE_OPTIONS (both JSON objects)."""
    if flag_value is not None:
        return parse_storage_options(flag_value, FLAG)
    return parse_storage_options(environ.get(ENV_VAR), ENV_VAR)


def pop_storage_options_flag(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the value of `--storage-options JSON` / `--storage-options=JSON`, argv without it).

    Taken out before draccus sees the rest: a JSON object would be read as YAML there."""
    value, rest, i = None, [], 0
    while i < len(argv):
        arg = argv[i]
        name, has_value, inline = arg.partition("=")
        if name in _FLAG_NAMES:
            if has_value:
                value = inline
            elif i + 1 < len(argv):
                value, i = argv[i + 1], i + 1
            else:
                raise ExecutorError(f"{FLAG} needs a JSON object as its value")
        else:
            rest.append(arg)
        i += 1
    return value, rest


def redact_argv(argv: list[str]) -> list[str]:
    """argv as it may be recorded: the value of --storage-options replaced by ***."""
    out, hide_next = [], False
    for arg in argv:
        name, has_value, _ = arg.partition("=")
        if hide_next:
            out.append("***")
            hide_next = False
        elif name in _FLAG_NAMES:
            out.append(f"{name}=***" if has_value else arg)
            hide_next = not has_value
        else:
            out.append(arg)
    return out


# -- the step's storage ----------------------------------------------------------------------------

@contextlib.contextmanager
def using(storage: Storage) -> Iterator[Storage]:
    """Make `storage` the current step's storage in this thread / task for the block (runners do
    this around a step function and each map_shards task)."""
    token = _step_storage.set(storage)
    try:
        yield storage
    finally:
        _step_storage.reset(token)


def current_storage() -> Storage:
    """The storage options of the step running here (none outside a step)."""
    return _step_storage.get()


# -- opening --------------------------------------------------------------------------------------

def filesystem_of(where: Location, **overrides: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the backend-local path for a location, its options applied.

    Local paths get a filesystem that creates parent directories on write, like object stores do.
    `overrides` (e.g. a download source's own options) take precedence over the location's."""
    import fsspec

    protocol, rest = split_url(where.url)
    if protocol == "file":
        return fsspec.filesystem("file", auto_mkdir=True), rest
    # Listings are not cached: other processes (workers, other runners) write under the same
    # prefix, and a cached listing hides their files (s3fs even reports them missing).
    fresh = {"use_listings_cache": False} if protocol in OBJECT_STORES else {}
    try:
        return fsspec.core.url_to_fs(where.url, **{**fresh, **where.options, **overrides})
    except TypeError as e:  # an option the backend does not take, reported from deep inside it
        raise ExecutorError(f"storage options for {protocol}:// paths: {e}. {_FIX}") from None


def url_to_fs(url: str, storage: Storage | None = None, **overrides: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and backend-local path for `url` with the options `storage` has for it (by
    default the current step's: `current_storage()`); `overrides` take precedence."""
    return filesystem_of((storage if storage is not None else current_storage()).location(url), **overrides)


def open_file(url: str, mode: str = "rb", *, storage: Storage | None = None,
              storage_options: Mapping[str, Any] | None = None, **kwargs: Any) -> fsspec.core.OpenFile:
    """`fsspec.open` for `url` with the options `storage` has for it (by default the current
    step's); `storage_options` override them for this one file; kwargs: encoding, compression, ..."""
    import fsspec

    fs, path = url_to_fs(url, storage, **dict(storage_options or {}))
    return fsspec.core.OpenFile(fs, path, mode=mode, **kwargs)


class DeferredFilesystem:
    """Stands in for the fsspec filesystem of a location until an attribute of it is first used:
    a no-op re-run reads statuses through the coordination store and never needs it (importing
    fsspec costs a tenth of a second)."""

    def __init__(self, where: Location):
        self.where = where

    @functools.cached_property
    def opened(self) -> "fsspec.AbstractFileSystem":
        return filesystem_of(self.where)[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("where", "opened"):  # (un)pickling, copying
            raise AttributeError(name)
        return getattr(self.opened, name)

    def __repr__(self) -> str:
        return f"DeferredFilesystem({self.where!r})"


def opened(fs: Any) -> "fsspec.AbstractFileSystem":
    """The real filesystem behind a DeferredFilesystem (any other filesystem as it is)."""
    return fs.opened if isinstance(fs, DeferredFilesystem) else fs


def bare_path(path: str) -> str:
    """The backend-local form of a path or URL, as listings return it (`gs://b/k/` -> `b/k`)."""
    protocol, rest = split_url(path)
    if protocol == "file":
        return rest.rstrip("/")
    if protocol == "memory":
        return ("/" + rest.lstrip("/")).rstrip("/")  # fsspec's memory filesystem roots paths at /
    return rest.rstrip("/")


def open_store(prefix: str, storage: Storage | Mapping[str, Any] | None = None, *,
               check: bool = True, deadline_s: float = PROBE_DEADLINE_S) -> CoordinationStore:
    """The coordination store for a prefix: object stores wrapped in RetryingStore, and (unless
    `check` is off) connected and probed within `deadline_s` once gcsfs/s3fs is loaded, so an
    unreachable bucket is one clear line within that bound (docs/storage.md), credentials lookup
    included."""
    from executor.engine.store.retry import RetryingStore

    storage = storage_from(storage, prefix)
    if not is_object_store(prefix):
        return _connect(prefix, None)
    options = storage.options_for(prefix)
    if not check:
        return RetryingStore(_connect(prefix, options))
    _load_backend(prefix)  # importing gcsfs/s3fs is this machine's work (seconds under load): before the clock

    def connect_and_probe() -> CoordinationStore:
        store = _connect(prefix, options)  # gcsfs looks for credentials here (a metadata server: ~20 s offline)
        _probe(store)
        return store

    return RetryingStore(_within(deadline_s, prefix, connect_and_probe))


def _load_backend(prefix: str) -> None:
    import importlib

    try:
        importlib.import_module(f"executor.engine.store.{'gcs' if split_url(prefix)[0] == 'gs' else 's3'}")
    except ImportError:  # open_raw_store names the package to install
        pass


def _connect(prefix: str, options: Mapping[str, Any] | None) -> CoordinationStore:
    try:
        return open_raw_store(prefix, options)
    except TypeError as e:
        raise ExecutorError(f"storage options for {prefix}: {e}. {_FIX}") from None


def open_location(prefix: str, storage: Storage | Mapping[str, Any] | None = None) -> tuple[CoordinationStore, fsspec.AbstractFileSystem]:
    """(store, filesystem) for `prefix` with the options `storage` has for it (a Storage, an object
    keyed by location, or one object for the prefix's protocol)."""
    storage = storage_from(storage, prefix)
    store = open_store(prefix, storage)
    return store, DeferredFilesystem(storage.location(prefix))  # type: ignore[return-value]


def open_filesystem(prefix: str, storage: Storage | Mapping[str, Any] | None = None) -> fsspec.AbstractFileSystem:
    """The filesystem for `prefix`; an object-store prefix is probed first, like `open_store` does."""
    storage = storage_from(storage, prefix)
    if is_object_store(prefix):
        open_store(prefix, storage)
    return filesystem_of(storage.location(prefix))[0]


# -- a clear error for a bucket that does not answer ----------------------------------------------

def check_reachable(store: CoordinationStore, prefix: str, timeout_s: float = PROBE_DEADLINE_S) -> None:
    """List one absent key (a listing, unlike a read, tells a missing bucket from a missing object)
    with a short retry budget, within `timeout_s`; any failure is one ExecutorError line naming the
    prefix and what to set. Nothing is written."""
    _within(timeout_s, prefix, lambda: _probe(store))


def _probe(store: CoordinationStore) -> None:
    from executor.engine.store.retry import RetryingStore, RetryPolicy

    # docs/storage.md: "a first listing is tried 3 times within 4 s, and given up after 10 s"
    quick = RetryingStore(store, RetryPolicy(max_attempts=PROBE_ATTEMPTS, first_delay_s=0.2,
                                             total_budget_s=PROBE_BUDGET_S))
    quick.list_generations(PROBE_KEY + "/", "")


def _within(timeout_s: float, prefix: str, work: Any) -> Any:
    """`work()` on a daemon thread, waited for at most `timeout_s`: its result, or its failure (or
    its silence) as one ExecutorError line naming the prefix and what to check."""
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            outcome["value"] = work()
        except BaseException as e:  # noqa: BLE001 - reported below, on the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=attempt, name="storage-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    settings = f"the storage options ({FLAG} JSON or {ENV_VAR})"
    if thread.is_alive():
        raise ExecutorError(f"storage: no answer from {prefix} within {timeout_s:g}s; check endpoint_url and the "
                            f"credentials (key/secret, token) in {settings} and the network. Nothing was written.")
    if "error" not in outcome:
        return outcome.get("value")
    error = outcome["error"]
    detail = _one_line(str(error))
    if isinstance(error, ExecutorError):
        raise error
    if isinstance(error, TransientStoreError):
        raise ExecutorError(f"storage: cannot reach {prefix} ({detail}); check endpoint_url in {settings} "
                            f"and the network. Nothing was written.") from None
    if isinstance(error, StoreError):
        raise ExecutorError(f"storage: {prefix}: {detail.rstrip('.')} ({settings}). Nothing was written.") from None
    if isinstance(error, TypeError):
        raise ExecutorError(f"storage options for {prefix}: {detail}. Fix the keys in {settings}.") from None
    raise ExecutorError(f"storage: {prefix} did not answer a first read ({type(error).__name__}: {detail}); "
                        f"check {settings}. Nothing was written.") from None


def _one_line(text: str, limit: int = 400) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
