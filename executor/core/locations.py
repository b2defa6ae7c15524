"""Locations as values: a URL plus the storage options that apply to it, and a run's options keyed
by location.

Storage options (endpoints, credentials, fsspec settings) are given as one JSON object, as before
(it applies to every URL of the prefix's protocol), or as an object keyed by location:

    {"s3://corpus": {...}, "s3://runs/team": {...}, "gs://": {...}}

The longest key that matches a URL wins (a key matches itself and whatever lies below it, on `/`
boundaries: `s3://runs/team` covers `s3://runs/team/x`, not `s3://runs/teammate`). A `Storage`
holds such a map; `Storage.location(url)` is the `Location` with the options for that URL. Both
are plain values: built once per call from the flag, the variable or `Options(storage_options=)`,
handed inward and to workers as arguments and fields, never kept at module level. Their repr and
str name locations only, never an option's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from executor.core.errors import ExecutorError
from executor.core.urls import canonical, has_scheme, is_local, protocol_of, split_url

SOURCE = "storage options"  # how errors name the value when its origin is not known
_EXAMPLE = '{"s3://corpus": {"endpoint_url": "http://127.0.0.1:9000"}, "gs://": {"token": "anon"}}'


@dataclass(frozen=True, eq=True)
class Location:
    """A path or URL (scheme aliases resolved) and the storage options that apply to it."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def protocol(self) -> str:
        """`file`, `memory`, `gs`, `s3`, ... (see executor.core.urls)."""
        return protocol_of(self.url)

    @property
    def is_local(self) -> bool:
        return is_local(self.url)

    def join(self, *parts: str) -> Location:
        """This location with path parts appended (same options)."""
        joined = self.url.rstrip("/")
        for part in parts:
            if part:
                joined += "/" + part.strip("/")
        return Location(joined, self.options)

    def __repr__(self) -> str:
        return f"Location({self.url!r}, options {'hidden' if self.options else 'none'})"

    def __str__(self) -> str:
        return self.url


class Storage:
    """A run's storage options, keyed by location (normalized keys, longest match wins).

    Immutable and picklable: it travels to every worker inside each step's call. repr and str show
    the keys only."""

    __slots__ = ("_by_key",)

    def __init__(self, by_location: Mapping[str, Mapping[str, Any]] | None = None, *, source: str = SOURCE):
        by_key: dict[str, dict[str, Any]] = {}
        for key, options in (by_location or {}).items():
            _check_entry(key, options, source)
            normalized = _normalize_key(key)
            if normalized in by_key:
                raise ExecutorError(f"{source}: two keys name the location {normalized!r} (aliases such as "
                                    f"gcs:// and gs://, s3a:// and s3:// are one scheme); keep one of them")
            by_key[normalized] = dict(options)
        object.__setattr__(self, "_by_key", dict(sorted(by_key.items(), key=lambda kv: -len(kv[0]))))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Storage is immutable")

    def __reduce__(self) -> tuple:
        return (Storage, (self._by_key,))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_key))

    def options_for(self, url: str) -> dict[str, Any]:
        """The options of the longest key covering `url` (none for local paths and memory://)."""
        if protocol_of(url) in ("file", "memory"):
            return {}
        target = canonical(url)
        for key, options in self._by_key.items():  # longest first
            if _covers(key, target):
                return dict(options)
        return {}

    def location(self, url: str) -> Location:
        """`url` (aliases resolved) with the options that apply to it."""
        return Location(canonical(url), self.options_for(url))

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Storage) and other._by_key == self._by_key

    def __hash__(self) -> int:
        return hash(tuple(self._by_key))

    def __repr__(self) -> str:
        return f"Storage({list(self.keys)}, values hidden)"

    __str__ = __repr__


NO_STORAGE_OPTIONS = Storage()


def storage_from(value: Storage | Mapping[str, Any] | None, prefix: str | None = None, *,
                 source: str = SOURCE) -> Storage:
    """A `Storage` from what a user gave: a Storage as it is; an object keyed by location; or one
    object of options, which applies to the prefix's protocol (to none for a local or memory://
    prefix, as before). With `prefix` None a flat object is only checked (and dropped)."""
    if isinstance(value, Storage):
        return value
    if not value:
        return NO_STORAGE_OPTIONS
    if not isinstance(value, Mapping):
        raise ExecutorError(f"{source} must be a JSON object, not {type(value).__name__}; e.g. {_EXAMPLE}")
    if is_keyed(value, source):
        return Storage(value, source=source)
    if prefix is None or protocol_of(prefix) in ("file", "memory"):
        return NO_STORAGE_OPTIONS
    return Storage({f"{protocol_of(prefix)}://": value}, source=source)


def is_keyed(value: Mapping[str, Any], source: str = SOURCE) -> bool:
    """Whether an options object is keyed by location (every key a URL) rather than one set of
    options (every key an option name); a mix of both is an error naming the odd key."""
    urls = [k for k in value if isinstance(k, str) and has_scheme(k)]
    if not urls:
        for key in value:
            if not (isinstance(key, str) and key.isidentifier()):
                raise ExecutorError(
                    f"{source}: key {key!r} is neither an option name (such as endpoint_url) nor a location "
                    f"(such as s3://bucket or gs://); give one object of options, or one object per location: "
                    f"{_EXAMPLE}")
        return False
    option_names = [k for k in value if k not in urls]
    if option_names:
        raise ExecutorError(
            f"{source}: key {option_names[0]!r} is an option name beside location keys ({urls[0]!r}); an object "
            f"keyed by location has only location keys, each with its own options, e.g. {_EXAMPLE}")
    return True


def _check_entry(key: Any, options: Any, source: str) -> None:
    if not isinstance(key, str) or not has_scheme(key):
        raise ExecutorError(f"{source}: key {key!r} is not a location; keys look like s3://bucket, "
                            f"s3://bucket/path or gs:// (every bucket of that scheme), e.g. {_EXAMPLE}")
    protocol, rest = split_url(key)
    if protocol in ("file", "memory"):
        raise ExecutorError(f"{source}: key {key!r}: local paths and memory:// take no storage options; "
                            f"remove it")
    if rest.startswith("/") or "//" in rest:
        raise ExecutorError(f"{source}: key {key!r} has an empty bucket or path part; write it as "
                            f"{protocol}://BUCKET/optional/path or {protocol}://")
    if not isinstance(options, Mapping):
        kind = "a string" if isinstance(options, str) else type(options).__name__
        raise ExecutorError(f"{source}: the value of {key!r} is {kind}, not an object of options; write "
                            f'"{key}": {{"endpoint_url": ..., "key": ..., "secret": ...}}')
    for name in options:
        if not (isinstance(name, str) and name.isidentifier()):
            raise ExecutorError(f"{source}: the options of {key!r} have the key {name!r}, which is not an option "
                                f"name (such as endpoint_url); locations cannot be nested")


def _normalize_key(key: str) -> str:
    url = canonical(key)
    return url if url.endswith("://") else url.rstrip("/")


def _covers(key: str, url: str) -> bool:
    if key.endswith("://"):
        return url.startswith(key)
    return url == key or url.startswith(key + "/")
