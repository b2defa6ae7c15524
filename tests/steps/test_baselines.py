"""The zstd baseline is in bits per byte, as the quickstart's comparison labels it (issue 46: a
baseline in bytes per byte passed every eval test, which only bounded it by 0 and 8)."""

from __future__ import annotations

import random

import pytest
import zstandard

# JAX is imported inside the test (steps.eval imports it), never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def test_the_zstd_baseline_is_the_compressed_size_in_bits_per_byte_of_the_text():
    """Random letters from 16 symbols carry exactly 4 bits a byte: no compressor goes below that,
    and zstd gets within a bit of it; in bytes per byte the figure would be about 0.55."""
    from steps.eval.baselines import zstd_bpb

    rng = random.Random(46)
    texts = ["".join(rng.choice("abcdefghijklmnop") for _ in range(3000)) for _ in range(4)]
    bpb, n_bytes = zstd_bpb(texts, level=19)
    raw = "".join(texts).encode("utf-8")
    assert n_bytes == len(raw) == 12000
    assert bpb == 8 * len(zstandard.ZstdCompressor(level=19).compress(raw)) / len(raw)
    assert 4.0 <= bpb < 5.0, bpb
