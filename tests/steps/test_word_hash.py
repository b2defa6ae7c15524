"""The numpy word hashes (steps/dedup/word_hash.py) are xxhash's xxh3-64, for every length and mix of
texts, so signatures, candidate pairs and kept sets are the same as hashing word by word."""

from __future__ import annotations

import numpy as np
import xxhash

from steps.dedup.minhash import _ASCII_WORDS, _word_hashes, shingle_batch, words
from steps.dedup.word_hash import ascii_word_hashes, short_hashes


def test_every_length_from_1_to_16_bytes_hashes_as_xxhash_does():
    rng = np.random.default_rng(0)
    lengths = np.tile(np.arange(1, 17), 300)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    raw = data.tobytes()
    want = [xxhash.xxh3_64_intdigest(raw[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist())]
    assert short_hashes(data, starts, lengths).tolist() == want


def test_the_words_of_ascii_texts_hash_as_word_by_word():
    texts = ["Hello, World! hello_world 42", "", "   ...  ", "a", "Supercalifragilisticexpialidocious words"
             " longer than sixteen bytes: abcdefghijklmnopq", "x" * 200, "tabs\tand\nnew\x1flines"]
    hashes, counts = ascii_word_hashes(texts, _ASCII_WORDS)
    tokens = [words(t) for t in texts]
    assert counts.tolist() == [len(t) for t in tokens]
    assert hashes.tolist() == [xxhash.xxh3_64_intdigest(w) for t in tokens for w in t]


def _reference_shingles(texts: list[str], ngram: int) -> list[list[int]]:
    """Word by word: xxhash per word, the polynomial of n consecutive words (minhash.py's), fmix64."""
    mask, mult = (1 << 64) - 1, 0x9E3779B97F4A7C15
    out = []
    for text in texts:
        h = [xxhash.xxh3_64_intdigest(w) for w in words(text)]
        n = ngram if len(h) >= ngram else len(h)
        shingles = []
        for i in range(len(h) - n + 1 if h else 0):
            acc = h[i]
            for j in range(1, n):
                acc = (acc * mult + h[i + j]) & mask
            for shift, m in ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53), (33, None)):
                acc ^= acc >> shift
                acc = (acc * m) & mask if m else acc
            shingles.append(acc)
        out.append(shingles)
    return out


def test_a_batch_mixing_ascii_and_other_texts_gives_each_text_its_own_shingles():
    texts = ["the café is naïve about straße", "plain ascii text with enough words to shingle", "日本語 のテキスト",
             "", "short one", "Ünïcödé → €20 © and more words here", "the last plain text of the batch"]
    hashes, counts = shingle_batch(texts, 3)
    got = np.split(hashes, np.cumsum(counts)[:-1])
    assert [g.tolist() for g in got] == _reference_shingles(texts, 3)


def test_repeated_and_non_ascii_words_of_every_byte_length_hash_as_word_by_word():
    """Each distinct word of a batch is hashed once (word_hash.spaced_word_hashes) and every occurrence
    gets its hash: words repeated across texts, non-ASCII words of 1 to 48 UTF-8 bytes, texts of
    separators only, and batches with no words at all."""
    rng = np.random.default_rng(1)
    alphabet = ["a", "z", "9", "_", "é", "ß", "日", "本", "€", "ж", "𝔘"]  # 1 to 4 UTF-8 bytes each
    vocabulary = ["".join(rng.choice(alphabet, n)) for n in range(1, 17)] + ["word", "Word", "WORD", "x"]
    texts = [" ".join(rng.choice(vocabulary, 30)) + " , . " + " ".join(rng.choice(vocabulary, 7)) for _ in range(40)]
    texts += ["", " ... ", "word Word", "日本語のテキスト 日本語のテキスト", "naïve naïve ascii ascii"]
    for batch in (texts, texts[::-1], ["", "  "], []):
        hashes, counts = _word_hashes(batch)
        tokens = [words(t) for t in batch]
        assert counts.tolist() == [len(t) for t in tokens]
        assert hashes.tolist() == [xxhash.xxh3_64_intdigest(w) for t in tokens for w in t]
    assert max(len(w.encode("utf-8")) for t in texts for w in words(t)) > 16
