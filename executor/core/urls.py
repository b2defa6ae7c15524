"""The one parser of storage URLs: which protocol a path or URL names, with its aliases.

Every "is this a bucket?" question in the code base is answered here. A plain path and `file://`
are `file`; `gcs://` is `gs`; `s3a://` is `s3`; `memory://` is `memory`; any other scheme (e.g.
`https`) is its own lower-cased name. A prefix spelled so that it would silently be something
else (`gs:/bucket`: a local folder named `gs:`) is refused here too, with the right spelling.
"""

from __future__ import annotations

import re

from executor.core.errors import ExecutorError

ALIASES = {"gcs": "gs", "s3a": "s3", "local": "file"}
OBJECT_STORES = frozenset({"gs", "s3"})
STORE_PROTOCOLS = frozenset({"file", "memory", "gs", "s3"})  # what a prefix (coordination store) may be
PREFIX_SPELLINGS = "a directory, gs://bucket/path, s3://bucket/path or memory://path"
# `gs:/b`, `s3:b`, `gcs:/b`, `memory:x`: a known scheme without its `://` (else a local folder named `gs:`)
_MISSPELLED = re.compile(r"^(?P<scheme>" + "|".join(sorted({*ALIASES, *STORE_PROTOCOLS}, key=len, reverse=True))
                         + r"):(?!//)/*(?P<rest>.*)$", re.IGNORECASE)


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


def check_prefix_spelling(prefix: str, source: str = "--prefix") -> None:
    """Refuse what would silently become something else: `gs:/bucket` (a local folder `gs:`), a scheme
    no store serves (`gss://`), a bucket URL without a bucket (`s3://`, `gs:///x`)."""
    wrong = _MISSPELLED.match(prefix.strip())
    if wrong:
        scheme = wrong["scheme"].lower()
        right = f"{ALIASES.get(scheme, scheme)}://{wrong['rest']}"
        if protocol_of(right) == "file":
            right = f"/{wrong['rest']} (or file:///{wrong['rest']})"
        raise ExecutorError(f"{source} {prefix}: '{wrong['scheme']}:' without two slashes would be a local folder "
                            f"named '{wrong['scheme']}:'; write {right}")
    protocol, rest = split_url(prefix.strip())
    if protocol not in STORE_PROTOCOLS:
        raise ExecutorError(f"{source} {prefix}: a prefix cannot be a {protocol}:// URL; give {PREFIX_SPELLINGS}")
    if protocol in OBJECT_STORES and not rest.split("/", 1)[0]:
        raise ExecutorError(f"{source} {prefix}: no bucket named; write {protocol}://BUCKET/path")
