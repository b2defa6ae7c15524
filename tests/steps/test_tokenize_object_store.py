"""Tokenize with input and output on S3 (the moto emulator): the same token cache as a local run,
read back through TokenSplit.open(url), and a run resumes from the shard markers on S3."""

from __future__ import annotations

from pathlib import Path

import fsspec
import numpy as np
import pytest

from steps import token_cache
from steps.token_cache import RangeReadArray, TokenSplit, read_ledger
from steps.tokenize import SPLITS, TokenizeConfig, tokenize

try:
    from emulators import S3_FAKE_CREDENTIALS, S3_REGION
except ImportError:
    from tests.emulators import S3_FAKE_CREDENTIALS, S3_REGION

SHARDS = 4


def config(input_path: str, output_path: str, **overrides) -> TokenizeConfig:
    return TokenizeConfig(input_path, output_path, vocab_size=400, num_output_shards=SHARDS,
                          validation_fraction=0.1, **overrides)


def stream(split: TokenSplit) -> np.ndarray:
    return split.window(0, split.num_tokens)


@pytest.fixture(scope="module")
def s3(s3_emulator):
    """The emulator, reached the way a step reaches S3: through s3fs's usual environment variables.

    Shards run in this process: Ray workers left by earlier tests were started without these variables.
    """
    from s3fs import S3FileSystem

    from executor.engine.runner import ray_env

    with pytest.MonkeyPatch.context() as env:
        env.setattr(ray_env, "ray_is_active", lambda: False)
        env.setenv("AWS_ACCESS_KEY_ID", S3_FAKE_CREDENTIALS["key"])
        env.setenv("AWS_SECRET_ACCESS_KEY", S3_FAKE_CREDENTIALS["secret"])
        env.setenv("AWS_ENDPOINT_URL", s3_emulator.endpoint_url)
        env.setenv("AWS_DEFAULT_REGION", S3_REGION)
        S3FileSystem.clear_instance_cache()  # no filesystem made before these variables were set
        yield s3_emulator
    S3FileSystem.clear_instance_cache()  # nor one bound to the emulator after the module


@pytest.fixture(scope="module")
def s3_input(s3, small_corpus) -> str:
    url = s3.fresh_prefix("tokenize-in")
    small_corpus.write(url, num_shards=3)
    return url


@pytest.fixture(scope="module")
def local_run(small_corpus, tmp_path_factory) -> tuple[str, dict]:
    root = tmp_path_factory.mktemp("tokenize-local")
    small_corpus.write(str(root / "in"), num_shards=3)
    out = str(root / "out")
    return out, tokenize(config(str(root / "in"), out))


def assert_same_cache(url: str, local: str) -> None:
    assert read_ledger(url) == read_ledger(local)
    for split in SPLITS:
        remote, here = TokenSplit.open(url, split), TokenSplit.open(local, split)
        assert all(isinstance(a, np.memmap) for a in here.tokens + here.offsets)  # local reads stay mmapped
        assert [a.dtype for a in remote.tokens] == [a.dtype for a in here.tokens]
        assert (remote.num_docs, remote.num_tokens, remote.num_bytes) == (here.num_docs, here.num_tokens,
                                                                          here.num_bytes)
        assert np.array_equal(stream(remote), stream(here))
        # a training window costs one ranged read of its own bytes, not the shard
        assert all(isinstance(a, RangeReadArray) for a in remote.tokens)
        reads, fs = [], remote.tokens[0].fs
        assert all(array.fs is fs for array in remote.tokens)
        real = fs.cat_file
        fs.cat_file = lambda path, start=None, end=None, **kw: (reads.append(end - start),
                                                                real(path, start=start, end=end, **kw))[1]
        try:
            assert np.array_equal(remote.window(5, 40), here.window(5, 40))
        finally:
            del fs.cat_file
        assert sum(reads) == 40 * here.tokens[0].dtype.itemsize, reads
        # the rest of the array protocol eval and the unigram baseline use: whole, iterated, sliced
        ranged, mapped = remote.tokens[0], here.tokens[0]
        assert np.array_equal(np.asarray(ranged), mapped) and list(ranged) == mapped.tolist()
        assert np.array_equal(ranged[3:9], mapped[3:9]) and len(ranged[9:3]) == 0 and ranged[-1] == mapped[-1]
        for r, h in zip(remote.offsets + remote.doc_bytes, here.offsets + here.doc_bytes):
            assert np.array_equal(r, h)


def test_tokenize_on_s3_writes_the_same_cache_as_a_local_run(s3, s3_input, local_run):
    local, local_result = local_run
    url = s3.fresh_prefix("tokenize-out")
    result = tokenize(config(s3_input, url))
    assert result == local_result and result["shards_resumed"] == 0
    fs, _ = fsspec.core.url_to_fs(url)
    assert fs.cat_file(f"{url}/tokenizer.json") == Path(local, "tokenizer.json").read_bytes()
    assert not [p for p in fs.find(url) if ".tmp-" in p]
    assert_same_cache(url, local)


def test_tokenize_on_s3_resumes_from_its_shard_markers(s3, s3_input, local_run, monkeypatch):
    local, _ = local_run
    url = s3.fresh_prefix("tokenize-resume")
    run = config(s3_input, url, tokenizer_path=f"{local}/tokenizer.json")
    tokenize(run)
    redo = "00002-of-00004"
    fs, _ = fsspec.core.url_to_fs(url)
    fs.rm(f"{url}/shards/{redo}.json")  # as if killed after the shard's arrays, before its marker
    fs.rm(f"{url}/ledger.json")
    fs.pipe_file(f"{url}/train/{redo}.tokens.npy", b"torn")
    fs.pipe_file(f"{url}/shards/{redo}.json.tmp-left-by-the-kill", b"{")

    written = []
    write_shard = token_cache.write_shard
    monkeypatch.setattr(token_cache, "write_shard",
                        lambda split_dir, name, *arrays: written.append(name) or write_shard(split_dir, name, *arrays))
    result = tokenize(run)
    assert result["shards_resumed"] == SHARDS - 1 and result["shards"] == SHARDS
    assert written == [redo] * len(SPLITS)
    assert fs.exists(f"{url}/shards/{redo}.json")
    assert not [p for p in fs.find(url) if ".tmp-" in p]
    assert_same_cache(url, local)
