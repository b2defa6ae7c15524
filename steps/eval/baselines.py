"""Baselines scored on exactly the same validation documents as the model.

- uniform: every token equally likely (log2 vocab bits per token);
- unigram: token frequencies counted on the train split, add-one smoothed over the vocabulary;
- zstd: the validation text's own compressed size (level 19), a model-free compressor that
  sees the text it compresses (it is not charged for a dictionary, nor is the LM for weights).
"""

from __future__ import annotations

import math

import numpy as np

from steps.token_cache import TokenSplit


def unigram_log_probs(train: TokenSplit, vocab_size: int) -> np.ndarray:
    counts = np.ones(vocab_size, np.float64)
    for shard in train.tokens:
        for lo in range(0, len(shard), 1 << 22):
            counts += np.bincount(np.asarray(shard[lo:lo + (1 << 22)]), minlength=vocab_size)[:vocab_size]
    return np.log(counts / counts.sum())


def unigram_bpb(log_probs: np.ndarray, targets: np.ndarray, n_bytes: int) -> float:
    return float(-log_probs[targets].sum() / math.log(2) / n_bytes)


def uniform_bpb(vocab_size: int, n_tokens: int, n_bytes: int) -> float:
    return n_tokens * math.log2(vocab_size) / n_bytes


def zstd_bpb(texts: list[str], level: int = 19) -> tuple[float, int]:
    """Compressed bits per byte of the texts joined as one stream; and the byte count used."""
    import zstandard

    raw = "".join(texts).encode("utf-8")
    compressed = zstandard.ZstdCompressor(level=level).compress(raw)
    return 8 * len(compressed) / max(len(raw), 1), len(raw)
