"""The one parser of storage URLs: which protocol a path or URL names, with its aliases.

Every "is this a bucket?" question in the code base is answered here. A plain path and `file://`
are `file`; `gcs://` is `gs`; `s3a://` is `s3`; `memory://` is `memory`; any other scheme (e.g.
`https`) is its own lower-cased name.
"""

from __future__ import annotations

ALIASES = {"gcs": "gs", "s3a": "s3", "local": "file"}
OBJECT_STORES = frozenset({"gs", "s3"})
STORE_PROTOCOLS = frozenset({"file", "memory", "gs", "s3"})  # what a prefix (coordination store) may be


def split_url(url: str) -> tuple[str, str]:
    """(protocol, the rest after `://`): `("s3", "bucket/key")` for `s3a://bucket/key`,
    `("file", "/tmp/x")` for `/tmp/x` and `file:///tmp/x`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "file", url
    scheme = scheme.lower()
    return ALIASES.get(scheme, scheme), rest


def has_scheme(text: str) -> bool:
    """Whether `text` is written as a URL (`scheme://...`) rather than a plain path."""
    return "://" in text


def protocol_of(url: str) -> str:
    """`s3` for `s3://b/k` and `s3a://b/k`, `gs` for `gs://` and `gcs://`, `file` for a plain path
    or `file://`, `memory` for `memory://`; any other scheme as written (lower-cased)."""
    return split_url(url)[0]


def is_local(url: str) -> bool:
    """A path on this machine's disk (a plain path or `file://`)."""
    return protocol_of(url) == "file"


def is_object_store(url: str) -> bool:
    """A `gs://` or `s3://` location (aliases included): needs storage options, is probed."""
    return protocol_of(url) in OBJECT_STORES


def canonical(url: str) -> str:
    """`url` with its scheme's alias resolved (`s3a://b/k` -> `s3://b/k`); a local path or
    `file://` URL as a plain path; anything else unchanged."""
    protocol, rest = split_url(url)
    if protocol == "file":
        return rest
    return f"{protocol}://{rest}"
