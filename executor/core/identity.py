"""Identity documents, digests and step ids (pure functions).

step_id = "<name>-<first 12 hex of sha256(canonical identity document)>".
"""

from __future__ import annotations

import hashlib
from typing import Any

from executor.core.canonical import DigestOf, canonical_bytes, encode_value
from executor.core.step import ExecutorStep

IDENTITY_SCHEMA = 1
ID_HEX_CHARS = 12


def identity_document(step: ExecutorStep, digest_of: DigestOf) -> dict[str, Any]:
    return {
        "schema": IDENTITY_SCHEMA,
        "name": step.name,
        "code_version": step.code_version,
        "config": encode_value(step.config, digest_of, step.name),
    }


def identity_and_digest(step: ExecutorStep, digest_of: DigestOf) -> tuple[bytes, str]:
    """The canonical bytes of the step's identity document and their sha256 (the full digest)."""
    data = canonical_bytes(identity_document(step, digest_of))
    return data, hashlib.sha256(data).hexdigest()


def step_id(name: str, digest: str) -> str:
    return f"{name}-{digest[:ID_HEX_CHARS]}"
