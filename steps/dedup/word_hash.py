"""xxh3-64 of every word of a batch of texts, in Arrow and numpy: the same values as `xxhash.xxh3_64_intdigest`.

Hashing word by word costs a Python call and a str object per word. Instead each text is given as
its words separated by spaces (for ASCII text, `str.translate` lowercasing letters and blanking every
other character; for other text, the words `\\w+` finds, joined by spaces), and a batch is one UTF-8
buffer: Arrow splits it into words and dictionary-encodes them (C++, no Python per word), so each
distinct word of the batch is hashed once (a batch of 2,000 web pages has ~10x fewer distinct words
than words). XXH3-64 (seed 0, default secret) of inputs of 1 to 16 bytes, which are three short
formulas of the spec (lengths 1-3, 4-8 and 9-16), is evaluated for all distinct words at once;
longer words go through `xxhash`. `tests/steps/test_word_hash.py` checks every length against `xxhash`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
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
    return spaced_word_hashes([text.translate(table) for text in texts])


def spaced_word_hashes(spaced: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, counts): xxh3-64 of the words of each string (`string.split(" ")` without the empty
    ones: words hold no ASCII whitespace), in order, and how many words each string has."""
    blob = "".join(spaced).encode("utf-8")
    sizes = np.fromiter(map(len, spaced), np.int64, len(spaced))  # characters: bytes, unless some are not ASCII
    if sizes.sum() != len(blob):
        sizes = np.fromiter((len(s) if s.isascii() else len(s.encode("utf-8")) for s in spaced), np.int64, len(spaced))
    offsets = np.zeros(len(spaced) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    strings = pa.LargeStringArray.from_buffers(len(spaced), pa.py_buffer(offsets), pa.py_buffer(blob))
    import pyarrow.compute as pc  # here, not at the top: exact dedup and tokenize never pay its import (~0.05-0.1 s)

    lists = pc.ascii_split_whitespace(strings)  # runs of spaces give empty words, dropped below
    list_ends = _values(lists, np.int32, 1)  # positions in lists.values, read in place
    lo, hi = int(list_ends[0]), int(list_ends[-1])
    word_ends = _values(lists.values, np.int64, 1)[lo:hi + 1]
    nonempty = word_ends[1:] != word_ends[:-1]
    before = np.zeros(hi - lo + 1, np.int64)
    np.cumsum(nonempty, out=before[1:])
    encoded = pc.dictionary_encode(lists.values)
    vocabulary = _distinct_word_hashes(encoded.dictionary)
    return (vocabulary[_values(encoded.indices, np.int32)[lo:hi][nonempty]],
            before[list_ends[1:] - lo] - before[list_ends[:-1] - lo])


def _values(array: pa.Array, dtype: type, extra: int = 0) -> np.ndarray:
    """The array's slice of its buffer 1 (values, or offsets with `extra` 1), without a copy
    (`Array.to_numpy` would import pandas: 0.2-1 s a process)."""
    buffer = array.buffers()[1]
    values = np.frombuffer(buffer, dtype) if buffer is not None and buffer.size else np.zeros(1, dtype)
    return values[array.offset:array.offset + len(array) + extra]


def _distinct_word_hashes(words: pa.Array) -> np.ndarray:
    """xxh3-64 of each string of a large_string array (0 for an empty one)."""
    ends = _values(words, np.int64, 1)
    buffer = words.buffers()[2]
    data = np.frombuffer(buffer, np.uint8) if buffer is not None and buffer.size else np.zeros(0, np.uint8)
    starts, lengths = ends[:-1], np.diff(ends)
    hashes = np.zeros(len(words), np.uint64)
    short = (lengths >= 1) & (lengths <= 16)
    hashes[short] = short_hashes(data, starts[short], lengths[short])
    raw = data.data
    for i in np.flatnonzero(lengths > 16).tolist():
        hashes[i] = xxhash.xxh3_64_intdigest(raw[ends[i]:ends[i + 1]])
    return hashes


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
