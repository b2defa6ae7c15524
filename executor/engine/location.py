"""One way to open a location: a path or URL plus the storage options this process was given.

The executor registers the run's storage options (endpoints, credentials, fsspec settings) once
per process with `use_storage_options`; every step, tool and the executor itself then opens
paths through `url_to_fs` / `open_file`, so a step never needs to know which backend it is on and
never opens a URL without its options. Options are kept per protocol (`s3`, `gs`, ...): the
options given for an `s3://` prefix apply to every `s3://` path the run reads or writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: importing fsspec costs a tenth of a second a no-op run never needs
    import fsspec

_options_by_protocol: dict[str, dict[str, Any]] = {}


def protocol_of(url: str) -> str:
    """`s3` for `s3://b/k`, `gs` for `gs://` and `gcs://`, `file` for a plain path."""
    if "://" not in url:
        return "file"
    scheme = url.split("://", 1)[0].lower()
    return "gs" if scheme == "gcs" else scheme


def use_storage_options(prefix: str, options: dict[str, Any] | None) -> None:
    """Register `options` for every path of `prefix`'s protocol in this process."""
    protocol = protocol_of(prefix)
    if protocol == "file":
        return
    if options:
        _options_by_protocol[protocol] = dict(options)
    else:
        _options_by_protocol.pop(protocol, None)


def storage_options_for(url: str) -> dict[str, Any]:
    return dict(_options_by_protocol.get(protocol_of(url), {}))


def registered_storage_options() -> dict[str, dict[str, Any]]:
    """What this process was given, by protocol (for handing to worker processes)."""
    return {k: dict(v) for k, v in _options_by_protocol.items()}


def url_to_fs(url: str, **overrides: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the backend-local path for `url`, with this process's options applied.

    Local paths get a filesystem that creates parent directories on write, like object stores do.
    `overrides` (e.g. a download source's own options) take precedence over the registered ones.
    """
    import fsspec

    if protocol_of(url) == "file":
        path = url[len("file://"):] if url.startswith("file://") else url
        return fsspec.filesystem("file", auto_mkdir=True), path
    return fsspec.core.url_to_fs(url, **{**storage_options_for(url), **overrides})


def open_file(url: str, mode: str = "rb", **kwargs: Any) -> fsspec.core.OpenFile:
    """`fsspec.open` with this process's options for `url` (kwargs: encoding, compression, ...)."""
    import fsspec

    fs, path = url_to_fs(url)
    return fsspec.core.OpenFile(fs, path, mode=mode, **kwargs)
