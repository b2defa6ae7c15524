"""One way to open a location: a path or URL plus the storage options this process was given.

A prefix plus its storage options (endpoints, credentials, fsspec settings) becomes both the
coordination store (retrying transient errors) and the fsspec filesystem, here and nowhere else:
the executor, every tool and every step open paths through `open_location` / `open_store` /
`url_to_fs` / `open_file`. Options are registered per process and per protocol (`s3`, `gs`, ...)
with `use_storage_options`; Ray workers get them inside each StepCall (`StorageOptions`, whose repr
hides the values) and register them before the step runs, so a step never sees its backend.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # imported where used: importing fsspec costs a tenth of a second a no-op run never needs
    import fsspec

from executor.core.errors import ExecutorError
from executor.engine.store import CoordinationStore, StoreError, TransientStoreError, open_store as open_raw_store

ENV_VAR = "EXECUTOR_STORAGE_OPTIONS"
FLAG = "--storage-options"
PROBE_KEY = ".executor-reachability-probe"  # listed (never written) to check a bucket answers
_FLAG_NAMES = ("--storage-options", "--storage_options")

_options_by_protocol: dict[str, dict[str, Any]] = {}
_answered: set[tuple[str, str]] = set()  # (prefix, options) that answered a probe in this process


class StorageOptions:
    """Storage options by protocol, as handed to worker processes: the repr never shows values."""

    def __init__(self, by_protocol: Mapping[str, Mapping[str, Any]] | None = None):
        self.by_protocol = {p: dict(o) for p, o in (by_protocol or {}).items()}

    def __repr__(self) -> str:
        return f"StorageOptions({sorted(self.by_protocol)}, values hidden)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageOptions) and other.by_protocol == self.by_protocol


# -- which options: parsing, registering, handing on ---------------------------------------------

def protocol_of(url: str) -> str:
    """`s3` for `s3://b/k` (and `s3a://`), `gs` for `gs://` and `gcs://`, `file` for a plain path."""
    if "://" not in url:
        return "file"
    scheme = url.split("://", 1)[0].lower()
    return {"gcs": "gs", "s3a": "s3", "local": "file"}.get(scheme, scheme)


def parse_storage_options(text: str | None, source: str) -> dict[str, Any]:
    """A JSON object from the flag or the variable; anything else is a one-line usage error."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ExecutorError(f"{source} must be a JSON object such as '{{\"endpoint_url\": "
                            f"\"http://127.0.0.1:9000\"}}': {e}") from None
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


def use_storage_options(prefix: str, options: Mapping[str, Any] | None) -> None:
    """Register `options` for every path of `prefix`'s protocol in this process."""
    protocol = protocol_of(prefix)
    if protocol in ("file", "memory"):
        return
    if options:
        _options_by_protocol[protocol] = dict(options)
    else:
        _options_by_protocol.pop(protocol, None)


def use_registered(options: StorageOptions | None) -> None:
    """Make this process use exactly `options` (a worker, before it runs a step or a shard)."""
    _options_by_protocol.clear()
    if options is not None:
        _options_by_protocol.update({p: dict(o) for p, o in options.by_protocol.items()})


def registered_storage_options() -> StorageOptions:
    """What this process was given, by protocol (for handing to worker processes)."""
    return StorageOptions(_options_by_protocol)


def storage_options_for(url: str) -> dict[str, Any]:
    return dict(_options_by_protocol.get(protocol_of(url), {}))


# -- opening --------------------------------------------------------------------------------------

def url_to_fs(url: str, **overrides: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the backend-local path for `url`, with this process's options applied.

    Local paths get a filesystem that creates parent directories on write, like object stores do.
    `overrides` (e.g. a download source's own options) take precedence over the registered ones.
    """
    import fsspec

    if protocol_of(url) == "file":
        path = url.split("://", 1)[1] if "://" in url else url
        return fsspec.filesystem("file", auto_mkdir=True), path
    # Listings are not cached: other processes (workers, other runners) write under the same
    # prefix, and a cached listing hides their files (s3fs even reports them missing).
    fresh = {"use_listings_cache": False} if protocol_of(url) in ("s3", "gs") else {}
    try:
        return fsspec.core.url_to_fs(url, **{**fresh, **storage_options_for(url), **overrides})
    except TypeError as e:  # an option the backend does not take, reported from deep inside it
        raise ExecutorError(f"storage options for {url.split('://', 1)[0]}:// paths: {e}. Fix the keys "
                            f"in {FLAG} / {ENV_VAR} (see the gcsfs / s3fs documentation)") from None


class DeferredFilesystem:
    """Stands in for the fsspec filesystem of a location until an attribute of it is first used:
    a no-op re-run reads statuses through the coordination store and never needs it (importing
    fsspec costs a tenth of a second)."""

    def __init__(self, url: str, overrides: Mapping[str, Any] | None = None):
        self.url, self.overrides = url, dict(overrides or {})

    @functools.cached_property
    def opened(self) -> "fsspec.AbstractFileSystem":
        return url_to_fs(self.url, **self.overrides)[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("url", "overrides", "opened"):  # (un)pickling, copying
            raise AttributeError(name)
        return getattr(self.opened, name)


def opened(fs: Any) -> "fsspec.AbstractFileSystem":
    """The real filesystem behind a DeferredFilesystem (any other filesystem as it is)."""
    return fs.opened if isinstance(fs, DeferredFilesystem) else fs


def bare_path(path: str) -> str:
    """The backend-local form of a path or URL, as listings return it (`gs://b/k/` -> `b/k`)."""
    return (url_to_fs(path)[1] if "://" in path else path).rstrip("/")


def open_file(url: str, mode: str = "rb", *, storage_options: Mapping[str, Any] | None = None,
              **kwargs: Any) -> fsspec.core.OpenFile:
    """`fsspec.open` with this process's options for `url` (kwargs: encoding, compression, ...)."""
    import fsspec

    fs, path = url_to_fs(url, **dict(storage_options or {}))
    return fsspec.core.OpenFile(fs, path, mode=mode, **kwargs)


def open_store(prefix: str, options: Mapping[str, Any] | None = None, *,
               environ: Mapping[str, str] | None = None, check: bool = True) -> CoordinationStore:
    """The coordination store for a prefix: object stores wrapped in RetryingStore, and (unless
    `check` is off) probed once so an unreachable bucket is one clear line within seconds.

    Test-only: EXECUTOR_FAULTY_STORE="RATE,SEED" in `environ` wraps the store in FaultyStore
    (retryable errors at that seeded fraction of calls, half after the call took effect) under
    RetryingStore, for any prefix. Never set it outside tests.
    """
    from executor.engine.store.faulty import FaultyStore
    from executor.engine.store.retry import RetryingStore

    remote = protocol_of(prefix) not in ("file", "memory")
    try:
        store = open_raw_store(prefix, dict(options or {}) if remote else None)
    except TypeError as e:
        raise ExecutorError(f"storage options for {prefix}: {e}. Fix the keys in {FLAG} / {ENV_VAR} "
                            f"(see the gcsfs / s3fs documentation)") from None
    probe = (prefix.rstrip("/"), json.dumps(dict(options or {}), sort_keys=True, default=str))
    if remote and check and probe not in _answered:
        check_reachable(store, prefix)
        _answered.add(probe)
    faulty = (environ or {}).get("EXECUTOR_FAULTY_STORE", "").strip()
    if faulty:
        try:
            rate, seed = faulty.split(",")
            store = FaultyStore(store, failure_rate=float(rate), seed=int(seed))
        except ValueError as e:
            raise ExecutorError(f"EXECUTOR_FAULTY_STORE (test-only) must be 'RATE,SEED': {e}") from None
    return RetryingStore(store) if remote or faulty else store


def open_location(prefix: str, options: Mapping[str, Any] | None = None, *,
                  environ: Mapping[str, str] | None = None) -> tuple[CoordinationStore, fsspec.AbstractFileSystem]:
    """Register `options` for this process, then (store, filesystem) for `prefix`."""
    use_storage_options(prefix, options)
    store = open_store(prefix, options, environ=environ)
    return store, DeferredFilesystem(prefix)  # type: ignore[return-value]


def open_filesystem(prefix: str, options: Mapping[str, Any] | None = None) -> fsspec.AbstractFileSystem:
    """Register `options` for this process, then the filesystem for `prefix`; an object-store
    prefix is probed first (once per process), like `open_store` does."""
    use_storage_options(prefix, options)
    if protocol_of(prefix) not in ("file", "memory"):
        open_store(prefix, options)
    return url_to_fs(prefix)[0]


# -- a clear error for a bucket that does not answer ----------------------------------------------

def check_reachable(store: CoordinationStore, prefix: str, timeout_s: float = 10.0) -> None:
    """List one absent key (a listing, unlike a read, tells a missing bucket from a missing object)
    with a short retry budget; any failure is one ExecutorError line naming the prefix and what to
    set. Nothing is written."""
    from executor.engine.store.retry import RetryingStore, RetryPolicy

    quick = RetryingStore(store, RetryPolicy(max_attempts=3, first_delay_s=0.2, total_budget_s=4.0))
    failure: list[BaseException] = []

    def probe() -> None:
        try:
            quick.list_generations(PROBE_KEY + "/", "")
        except BaseException as e:  # noqa: BLE001 - reported below, on the caller's thread
            failure.append(e)

    thread = threading.Thread(target=probe, name="storage-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    settings = f"the storage options ({FLAG} JSON or {ENV_VAR})"
    if thread.is_alive():
        raise ExecutorError(f"storage: no answer from {prefix} within {timeout_s:g}s; check endpoint_url "
                            f"in {settings} and the network. Nothing was written.")
    if not failure:
        return
    error = failure[0]
    detail = _one_line(str(error))
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
