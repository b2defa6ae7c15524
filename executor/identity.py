"""Identity documents, digests and step ids (pure functions).

step_id = "<name>-<first 12 hex of sha256(canonical identity document)>".
"""

from __future__ import annotations

import hashlib
from typing import Any

from executor.canonical import DigestOf, canonical_bytes, encode_value
from executor.step import ExecutorStep

IDENTITY_SCHEMA = 1
ID_HEX_CHARS = 12


def identity_document(step: ExecutorStep, digest_of: DigestOf) -> dict[str, Any]:
    return {
        "schema": IDENTITY_SCHEMA,
        "name": step.name,
        "code_version": step.code_version,
        "config": encode_value(step.config, digest_of, step.name),
    }


def digest_of_document(document: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(document)).hexdigest()


def step_id(name: str, digest: str) -> str:
    return f"{name}-{digest[:ID_HEX_CHARS]}"
