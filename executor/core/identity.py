"""Identity documents, digests and step ids (pure functions).

step_id = "<name>-<first 12 hex of sha256(canonical identity document)>".
"""

from __future__ import annotations

import hashlib
import json

from executor.core.canonical import CanonicalEncoder, DigestOf, surrogate_error
from executor.core.step import ExecutorStep

IDENTITY_SCHEMA = 1
ID_HEX_CHARS = 12

_string = json.encoder.encode_basestring


def identity_text(step: ExecutorStep, encoder: CanonicalEncoder) -> str:
    """The identity document {code_version, config, name, schema} as canonical JSON text."""
    code_version = "null" if step.code_version is None else _string(step.code_version)
    config = encoder.config_text(step.config, step.name)
    return f'{{"code_version":{code_version},"config":{config},"name":{_string(step.name)},"schema":{IDENTITY_SCHEMA}}}'


def identity_and_digest(step: ExecutorStep, digest_of: DigestOf | CanonicalEncoder) -> tuple[bytes, str]:
    """The canonical bytes of the step's identity document and their sha256 (the full digest).

    Pass one CanonicalEncoder for a whole graph to share the encodings of common sub-configs.
    """
    encoder = digest_of if isinstance(digest_of, CanonicalEncoder) else CanonicalEncoder(digest_of)
    text = identity_text(step, encoder)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate somewhere: name the field that holds it
        raise surrogate_error(step) from None
    return data, hashlib.sha256(data).hexdigest()


def step_id(name: str, digest: str) -> str:
    return f"{name}-{digest[:ID_HEX_CHARS]}"
