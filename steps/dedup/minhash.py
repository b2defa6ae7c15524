"""Word n-gram shingles and MinHash signatures, vectorised with numpy.

- A document's text is lowercased and split into words (runs of letters/digits); each word is
  hashed once with xxh3-64 and the hashes of n consecutive words are combined (a polynomial over
  uint64 followed by a 64-bit finaliser), giving one 64-bit hash per word n-gram shingle.
- Each of the K MinHash "permutations" is a multiply-add-shift map of the shingle's high 32 bits:
  h_k(x) = ((a_k * x + b_k) mod 2^64) >> 32 with random odd a_k (a 2-universal family), evaluated
  for all shingles of a batch of documents at once; `np.minimum.reduceat` takes each document's min.
- `jaccard` is the exact Jaccard similarity of two documents' shingle sets, for verification.
"""

from __future__ import annotations

import re

import numpy as np
import xxhash

WORD = re.compile(r"\w+")
_MULT = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def shingle_hashes(text: str, ngram: int) -> np.ndarray:
    """64-bit hashes of the document's word n-grams (a document shorter than n is one shingle)."""
    tokens = words(text)
    if not tokens:
        return np.zeros(0, np.uint64)
    word_hashes = np.fromiter(map(xxhash.xxh3_64_intdigest, tokens), np.uint64, len(tokens))
    n = min(ngram, len(word_hashes))
    count = len(word_hashes) - n + 1
    with np.errstate(over="ignore"):
        acc = word_hashes[:count].copy()
        for j in range(1, n):
            acc = acc * _MULT + word_hashes[j:j + count]
        acc ^= acc >> _S33          # murmur3 fmix64: every input bit affects every output bit
        acc *= _M1
        acc ^= acc >> _S33
        acc *= _M2
        acc ^= acc >> _S33
    return acc


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
    num_docs, num_perm = len(shingles), len(a)
    signatures = np.full((num_docs, num_perm), np.iinfo(np.uint32).max, np.uint32)
    lengths = np.fromiter((len(s) for s in shingles), np.int64, num_docs)
    nonempty = np.nonzero(lengths)[0]
    if len(nonempty) == 0:
        return signatures
    x = np.concatenate([shingles[i] for i in nonempty]) >> _S32
    starts = np.concatenate([[0], np.cumsum(lengths[nonempty])[:-1]])
    values = np.empty_like(x)
    with np.errstate(over="ignore"):
        for k in range(num_perm):
            np.multiply(x, a[k], out=values)
            values += b[k]
            values >>= _S32
            signatures[nonempty, k] = np.minimum.reduceat(values, starts)
    return signatures


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted, unique shingle-hash arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)
