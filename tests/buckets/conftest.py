"""Experiments and tools on emulated buckets: fake-gcs-server and moto, credentials given only as
storage options (the experiments run in subprocesses whose environment holds no AWS_* variable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.emulators import Emulator, gcs_emulator, s3_emulator  # noqa: F401  (session fixtures)

REPO = Path(__file__).resolve().parents[2]
# Variables that could hand an experiment credentials or an endpoint behind the options' back.
_AMBIENT = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_REGION", "STORAGE_EMULATOR_HOST",
            "EXECUTOR_STORAGE_OPTIONS", "EXECUTOR_PREFIX", "RAY_ADDRESS")


@dataclass(frozen=True)
class Bucket:
    """One test's prefix on an emulator, with options that alone reach it."""

    scheme: str
    prefix: str
    options: dict[str, Any]
    secret: str | None  # a value that must never appear in a record, run file, log or output

    @property
    def options_json(self) -> str:
        return json.dumps(self.options)

    @property
    def storage(self):
        """The options as a run holds them: keyed by this bucket prefix."""
        from executor.core.locations import Storage

        return Storage({self.prefix: self.options})

    def fs(self):
        from executor.engine.prefix import location

        return location.open_filesystem(self.prefix, self.options)

    def objects(self) -> dict[str, bytes]:
        """Every object under the prefix, by path relative to it."""
        fs = self.fs()
        from executor.engine.prefix import location

        root = location.bare_path(self.prefix)
        return {p[len(root) + 1:]: fs.cat_file(p) for p in fs.find(self.prefix)}


def make_bucket(emulator: Emulator, label: str) -> Bucket:
    options = dict(emulator.storage_options)
    secret = None
    if emulator.scheme == "s3":  # moto takes any keys: make them unmistakable, to look for leaks
        secret = f"sk-{uuid.uuid4().hex}"
        options.update(key=f"AKIA{uuid.uuid4().hex[:16].upper()}", secret=secret)
    return Bucket(emulator.scheme, emulator.fresh_prefix(label), options, secret)


@pytest.fixture(params=["gs", "s3"])
def bucket(request) -> Bucket:
    emulator = request.getfixturevalue("gcs_emulator" if request.param == "gs" else "s3_emulator")
    return make_bucket(emulator, "b")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without ambient credentials or endpoints; IMDS off, so a lost
    option fails at once instead of asking a cloud metadata address."""
    env = {k: v for k, v in os.environ.items() if k not in _AMBIENT}
    env.update(AWS_EC2_METADATA_DISABLED="true", GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false", **extra)
    return env


def run_experiment(file: str, bucket: Bucket, *args: str, timeout: float = 600,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python experiments/<file> --prefix <bucket> --storage-options JSON ARGS` in a subprocess."""
    return subprocess.run([sys.executable, str(REPO / "experiments" / file), "--prefix", bucket.prefix,
                           "--storage-options", bucket.options_json, *args],
                          cwd=REPO, env=env or clean_environment(), capture_output=True, text=True, timeout=timeout)


def assert_no_secret(bucket: Bucket, *texts: str) -> None:
    if bucket.secret is None:
        return
    for text in texts:
        assert bucket.secret not in text
    for path, data in bucket.objects().items():
        assert bucket.secret.encode() not in data, f"the secret leaked into {path}"


# The incremental tests' corpora on buckets: tests/steps/test_incremental_shards.py's shards, fewer of
# them (every bucket request costs a round trip to an emulator): `first` has CORPUS_SHARDS shards;
# `grown` changes one (03), removes one (01) and adds one, so a run reuses CORPUS_SHARDS - 2 of them.
CORPUS_SHARDS = 6


@pytest.fixture(scope="module")
def shard_corpora(tmp_path_factory) -> dict[str, str]:
    from steps.bpe import train_byte_level_bpe
    from tests.steps.test_incremental_shards import _shard_docs, first_and_grown, write_corpus

    root = tmp_path_factory.mktemp("bucket-corpora")
    first, grown = first_and_grown(_shard_docs, CORPUS_SHARDS, 1, _shard_docs(3, salt=" (fixed)"))
    tokenizer = train_byte_level_bpe([d["text"] for docs in first.values() for d in docs], 400, "<|endoftext|>",
                                     min_frequency=2)
    (root / "tokenizer.json").write_text(tokenizer.to_str())
    return {"first": write_corpus(root / "first", first), "grown": write_corpus(root / "grown", grown),
            "tokenizer": str(root / "tokenizer.json")}
