"""Word n-gram shingles and MinHash signatures, vectorised with numpy.

- A document's text is lowercased and split into words (runs of letters/digits); each word is
  hashed once with xxh3-64 and the hashes of n consecutive words are combined (a polynomial over
  uint64 followed by a 64-bit finaliser), giving one 64-bit hash per word n-gram shingle. ASCII text
  (most of the web) is split by `str.translate` (the same words as the regex: for ASCII, `\\w` is
  [A-Za-z0-9_]); the words of a whole batch are hashed at once, each distinct word once (word_hash.py:
  the same values as xxhash's, without a Python call or a str per word).
- Each of the K MinHash "permutations" is a multiply-add-shift map of the shingle's high 32 bits:
  h_k(x) = ((a_k * x + b_k) mod 2^64) >> 32 with random odd a_k (a 2-universal family), evaluated
  for the shingles of a block of documents at once (~32k shingles, so the block stays in cache
  across the K passes); `np.minimum.reduceat` takes each document's min.
- `jaccard` is the exact Jaccard similarity of two documents' shingle sets, for verification.
"""

from __future__ import annotations

import re

import numpy as np

from steps.dedup.word_hash import spaced_word_hashes

WORD = re.compile(r"\w+")
_MULT = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_ASCII_WORDS = str.maketrans({c: (chr(c).lower() if chr(c).isalnum() or chr(c) == "_" else " ") for c in range(128)})
_BLOCK_SHINGLES = 1 << 15  # 256 KiB of uint64 per block: one block's values stay in the CPU cache


def words(text: str) -> list[str]:
    """`WORD.findall(text.lower())`; for ASCII text, by one translate and split."""
    if text.isascii():
        return text.translate(_ASCII_WORDS).split()
    return WORD.findall(text.lower())


def shingle_batch(texts: list[str], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, counts): the 64-bit hashes of the word n-grams of every text, concatenated in order, and
    how many each text has (a text shorter than n words is one shingle, one without words none).
    A batch at once: words hashed together (`_word_hashes`), then numpy over the whole batch."""
    word_hashes, counts = _word_hashes(texts)
    sizes = np.where(counts >= ngram, counts - ngram + 1, np.minimum(counts, 1))
    token_starts, shingle_starts = np.cumsum(counts) - counts, np.cumsum(sizes) - sizes
    first_word = np.repeat(token_starts - shingle_starts, sizes) + np.arange(int(sizes.sum()))
    full = np.repeat(counts >= ngram, sizes)   # shingles of n words; the others are whole short texts
    hashes = np.empty(len(first_word), np.uint64)
    hashes[full] = _combine(word_hashes, ngram)[first_word[full]]
    for d in np.nonzero((counts > 0) & (counts < ngram))[0].tolist():
        hashes[shingle_starts[d]] = _combine(word_hashes[token_starts[d]:token_starts[d] + counts[d]], int(counts[d]))[0]
    return _fmix(hashes), sizes


def _word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, counts): the xxh3-64 of every word of every text, in order, and how many each has
    (`words`' words; word_hash.py hashes them, each distinct word of the batch once)."""
    return spaced_word_hashes([text.translate(_ASCII_WORDS) if text.isascii()
                               else " ".join(WORD.findall(text.lower())) for text in texts])


def _combine(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """The polynomial of every window of n consecutive word hashes (empty when fewer than n)."""
    count = max(0, len(word_hashes) - n + 1)
    with np.errstate(over="ignore"):
        acc = word_hashes[:count].copy()
        for j in range(1, n):
            acc *= _MULT
            acc += word_hashes[j:j + count]
    return acc


def _fmix(acc: np.ndarray) -> np.ndarray:
    """murmur3's fmix64 in place: every input bit affects every output bit."""
    with np.errstate(over="ignore"):
        acc ^= acc >> _S33
        acc *= _M1
        acc ^= acc >> _S33
        acc *= _M2
        acc ^= acc >> _S33
    return acc


def shingle_hashes(text: str, ngram: int) -> np.ndarray:
    """64-bit hashes of the document's word n-grams (a document shorter than n is one shingle)."""
    return shingle_batch([text], ngram)[0]


def unique_per_text(hashes: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Each text's sorted unique shingle hashes, from `shingle_batch`'s (hashes, counts)."""
    return [_sorted_unique(text) for text in np.split(hashes, np.cumsum(counts)[:-1])]


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` for a 1-d array, by a sort and one comparison (~5x faster for small arrays)."""
    values = np.sort(values)
    keep = np.empty(len(values), bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def make_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) for num_perm hash functions: a odd, both uniform 64-bit, from `seed`."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2 ** 63, size=num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2 ** 63, size=num_perm, dtype=np.uint64) * np.uint64(2)
    return a, b


def minhash_signatures(shingles: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[docs, K] uint32 MinHash signatures of a batch of documents' shingle hashes.

    A document without shingles gets all-0xFFFFFFFF; callers exclude such documents from LSH.
    """
    counts = np.fromiter(map(len, shingles), np.int64, len(shingles))
    hashes = np.concatenate(shingles) if shingles else np.zeros(0, np.uint64)
    return batch_signatures(hashes, counts, a, b)


def batch_signatures(hashes: np.ndarray, counts: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`minhash_signatures` of documents given as `shingle_batch`'s (hashes, counts)."""
    num_docs, num_perm = len(counts), len(a)
    signatures = np.full((num_docs, num_perm), np.iinfo(np.uint32).max, np.uint32)
    nonempty = np.nonzero(counts)[0]
    if len(nonempty) == 0:
        return signatures
    x = hashes >> _S32
    ends = np.cumsum(counts[nonempty])
    mins = np.empty((len(nonempty), num_perm), np.uint64)
    values = np.empty(min(len(x), _BLOCK_SHINGLES + int(counts.max())), np.uint64)
    first = 0
    while first < len(nonempty):  # documents [first, last) hold shingles [lo, hi)
        lo = int(ends[first - 1]) if first else 0
        last = max(first + 1, int(np.searchsorted(ends, lo + _BLOCK_SHINGLES, side="right")))
        hi = int(ends[last - 1])
        _block_minima(x[lo:hi], np.r_[0, ends[first:last - 1] - lo], a, b, values[:hi - lo], mins[first:last])
        first = last
    signatures[nonempty] = mins >> _S32  # the shift is monotone: min, then shift, is shift, then min
    return signatures


def _block_minima(x: np.ndarray, starts: np.ndarray, a: np.ndarray, b: np.ndarray, values: np.ndarray,
                  out: np.ndarray) -> None:
    """out[d, k] = min over document d's shingles of (a_k * x + b_k) mod 2^64."""
    with np.errstate(over="ignore"):
        for k in range(len(a)):
            np.multiply(x, a[k], out=values)
            values += b[k]
            out[:, k] = np.minimum.reduceat(values, starts)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted, unique shingle-hash arrays (the intersection found by
    looking each value of the smaller up in the larger: no concatenation and sort)."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    if len(a) > len(b):
        a, b = b, a
    if len(a) == 0:
        return 0.0
    at = np.searchsorted(b, a)
    at[at == len(b)] = 0
    inter = int(np.count_nonzero(b[at] == a))
    return inter / (len(a) + len(b) - inter)
