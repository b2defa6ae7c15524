"""xxh3-64 of every word of a batch of ASCII texts, in numpy: the same values as `xxhash.xxh3_64_intdigest`.

Hashing word by word costs a Python call and a str object per word. For ASCII text, the words
are runs of bytes other than spaces once `str.translate` has lowercased letters and blanked every
other character, so a batch is one bytes object: word boundaries come from one comparison, and
XXH3-64 (seed 0, default secret) of inputs of 1 to 16 bytes, which are three short formulas of
the spec (lengths 1-3, 4-8 and 9-16), is evaluated for all words at once. Longer words (rare)
go through `xxhash`. `tests/steps/test_word_hash.py` checks every length against `xxhash`.
"""

from __future__ import annotations

import numpy as np
import xxhash

_U = np.uint64
_SECRET = bytes.fromhex("b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
                        "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c")
"""The first 64 bytes of XXH3's default secret (kSecret)."""
_P64_2, _P64_3 = _U(0xC2B2AE3D27D4EB4F), _U(0x165667B19E3779F9)
_MX1, _MX2 = _U(0x165667919E3779F9), _U(0x9FB21C651E98DF25)
_M32 = _U(0xFFFFFFFF)


def _le(offset: int, size: int) -> int:
    return int.from_bytes(_SECRET[offset:offset + size], "little")


_FLIP_1TO3 = _U(_le(0, 4) ^ _le(4, 4))
_FLIP_4TO8 = _U(_le(8, 8) ^ _le(16, 8))
_FLIP_9TO16 = (_U(_le(24, 8) ^ _le(32, 8)), _U(_le(40, 8) ^ _le(48, 8)))


def ascii_word_hashes(texts: list[str], table: dict[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, counts): xxh3-64 of the words of each text (`text.translate(table).split()`), in
    order, and how many words each text has. Every text must be ASCII and `table` must turn every
    ASCII character into itself lowercased or into a space."""
    blob = (" ".join(text.translate(table) for text in texts) + " ").encode("ascii")
    data = np.frombuffer(blob, np.uint8)
    edges = np.diff((data != 32).view(np.int8), prepend=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    lengths = ends - starts
    sizes = np.fromiter(map(len, texts), np.int64, len(texts)) + 1
    counts = np.diff(np.searchsorted(starts, np.r_[np.cumsum(sizes) - sizes, len(data)]))
    hashes = np.empty(len(starts), np.uint64)
    short = lengths <= 16
    hashes[short] = short_hashes(data, starts[short], lengths[short])
    for i in np.flatnonzero(~short).tolist():
        hashes[i] = xxhash.xxh3_64_intdigest(blob[starts[i]:ends[i]])
    return hashes, counts


def short_hashes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """xxh3-64 of `data[s:s + n]` for each (s, n), 1 <= n <= 16."""
    words = _Unaligned(data)
    out = np.empty(len(starts), np.uint64)
    n = lengths.astype(np.uint64)
    with np.errstate(over="ignore"):
        m = lengths <= 3
        s, k = starts[m], lengths[m]
        combined = ((data[s].astype(np.uint64) << _U(16)) | (data[s + (k >> 1)].astype(np.uint64) << _U(24))
                    | data[s + k - 1].astype(np.uint64) | (n[m] << _U(8)))
        out[m] = _xxh64_avalanche(combined ^ _FLIP_1TO3)
        m = (lengths >= 4) & (lengths <= 8)
        s, k = starts[m], lengths[m]
        out[m] = _rrmxmx((words.read(s + k - 4) & _M32) + (words.read(s) << _U(32)) ^ _FLIP_4TO8, n[m])
        m = lengths >= 9
        s, k = starts[m], lengths[m]
        low, high = words.read(s) ^ _FLIP_9TO16[0], words.read(s + k - 8) ^ _FLIP_9TO16[1]
        out[m] = _xxh3_avalanche(n[m] + low.byteswap() + high + _mul128_fold64(low, high))
    return out


class _Unaligned:
    """Little-endian uint64 reads at any byte offset: 8 copies of the bytes, shifted by 0..7."""

    def __init__(self, data: np.ndarray) -> None:
        self.rows = (len(data) + 15) // 8
        padded = np.zeros(self.rows * 8 + 8, np.uint8)
        padded[:len(data)] = data
        self.flat = np.empty(8 * self.rows, np.uint64)
        for shift in range(8):
            self.flat[shift * self.rows:(shift + 1) * self.rows] = padded[shift:shift + self.rows * 8].view("<u8")

    def read(self, offsets: np.ndarray) -> np.ndarray:
        return self.flat.take((offsets & 7) * self.rows + (offsets >> 3))


def _xxh64_avalanche(h: np.ndarray) -> np.ndarray:
    h ^= h >> _U(33)
    h *= _P64_2
    h ^= h >> _U(29)
    h *= _P64_3
    return h ^ (h >> _U(32))


def _rrmxmx(h: np.ndarray, n: np.ndarray) -> np.ndarray:
    h ^= ((h << _U(49)) | (h >> _U(15))) ^ ((h << _U(24)) | (h >> _U(40)))
    h *= _MX2
    h ^= (h >> _U(35)) + n
    h *= _MX2
    return h ^ (h >> _U(28))


def _xxh3_avalanche(h: np.ndarray) -> np.ndarray:
    h ^= h >> _U(37)
    h *= _MX1
    return h ^ (h >> _U(32))


def _mul128_fold64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The low 64 bits of the 128-bit product a * b xor its high 64 bits (from 32-bit halves)."""
    a_lo, a_hi, b_lo, b_hi = a & _M32, a >> _U(32), b & _M32, b >> _U(32)
    lo_lo, hi_lo, lo_hi, hi_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi, a_hi * b_hi
    cross = (lo_lo >> _U(32)) + (hi_lo & _M32) + lo_hi
    upper = (hi_lo >> _U(32)) + (cross >> _U(32)) + hi_hi
    return ((cross << _U(32)) | (lo_lo & _M32)) ^ upper
