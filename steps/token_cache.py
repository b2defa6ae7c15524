"""The token cache format shared by tokenize (writer) and train/eval (readers).

Layout of a tokenize step's output directory:

    tokenizer.json                      the HF tokenizers file used to encode
    ledger.json                         {schema, tokenizer_sha256, vocab_size, eos_id, dtype,
                                         splits: {split: {docs, tokens, bytes,
                                                          shards: [{name, docs, tokens, bytes}]}}}
    <split>/<name>.tokens.npy           flat token ids; every document is followed by EOS
    <split>/<name>.offsets.npy          int64 [docs + 1]: document i is tokens[off[i]:off[i+1]]
    <split>/<name>.bytes.npy            int64 [docs]: UTF-8 byte length of document i's text

All arrays are plain .npy files, so readers memory-map them and read any window at random.
A shard's three arrays are written (atomically, each) before the ledger names the shard.
The root may be a local path or an fsspec URL (gs://, s3://); local files stay memory-mapped,
and on an object store token streams are read by byte range (RangeReadArray).
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.token_cache", DATA)

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import fsspec

from executor import url_to_fs
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from steps.documents import write_file_atomically

LEDGER_SCHEMA = 1


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32)


def join(root: str | Path, *parts: str) -> str:
    """`root/part/...` for a local path or a URL."""
    return "/".join([str(root).rstrip("/"), *(part.strip("/") for part in parts if part)])


def save_array_atomically(path: str | Path, array: np.ndarray) -> str:
    """np.save to `path` (local or URL), never leaving a torn file; returns the sha256 of the bytes
    written (so a shard's index entry need not read the file back to hash it)."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    data = buffer.getvalue()
    write_file_atomically(path, lambda f: f.write(data))
    return hashlib.sha256(data).hexdigest()


def write_shard(split_dir: str | Path, name: str, tokens: np.ndarray, offsets: np.ndarray,
                doc_bytes: np.ndarray, digests: dict[str, str] | None = None) -> dict:
    """Write one shard's arrays; returns its ledger entry. `digests`, when given, gets the sha256
    of each file written, by its name under `split_dir`."""
    if offsets[0] != 0 or offsets[-1] != len(tokens) or len(doc_bytes) != len(offsets) - 1:
        raise ValueError(f"shard {name}: offsets/bytes do not describe the token array")
    written = digests if digests is not None else {}
    for kind, array in (("tokens", tokens), ("offsets", offsets.astype(np.int64)),
                        ("bytes", doc_bytes.astype(np.int64))):
        written[f"{name}.{kind}.npy"] = save_array_atomically(join(split_dir, f"{name}.{kind}.npy"), array)
    return {"name": name, "docs": int(len(doc_bytes)), "tokens": int(len(tokens)),
            "bytes": int(doc_bytes.sum())}


def read_ledger(root: str | Path) -> dict:
    path = join(root, "ledger.json")
    fs, target = url_to_fs(path)
    try:
        ledger = json.loads(fs.cat_file(target))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no token cache here (is this a tokenize step's output?)") from None
    if ledger.get("schema", 0) > LEDGER_SCHEMA:
        raise ValueError(f"{path}: ledger schema {ledger['schema']} is newer than this code knows ({LEDGER_SCHEMA})")
    return ledger


def load_array(path: str, *, ranged: bool = False):
    """A .npy file: memory-mapped when local; on an object store read by byte range when `ranged`
    (token streams), else whole (offsets and byte lengths: 16 bytes per document)."""
    fs, target = url_to_fs(path)
    if isinstance(fs, LocalFileSystem):
        return np.load(target, mmap_mode="r")
    if ranged:
        return RangeReadArray(fs, target)
    return np.load(io.BytesIO(fs.cat_file(target)))


class RangeReadArray:
    """A 1-d .npy file on an object store, read by byte range: the token stream of a shard,
    of which a training host needs only the windows of its own batch rows (never the whole
    corpus in memory). Slicing with a step of 1 is a single ranged GET."""

    HEADER_PROBE = 4096

    def __init__(self, fs, path: str):
        self.fs, self.path = fs, path
        head = io.BytesIO(fs.cat_file(path, start=0, end=self.HEADER_PROBE))
        version = np.lib.format.read_magic(head)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"{path}: .npy format version {version} is not one np.save writes for token ids")
        shape, _, dtype = read_header(head)
        if len(shape) != 1:
            raise ValueError(f"{path}: a token stream is 1-d, this array has shape {shape}")
        self.shape, self.dtype, self._data_start = shape, np.dtype(dtype), head.tell()

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self[int(index):int(index) + 1 or None][0]
        start, stop, step = index.indices(len(self))
        if step != 1:
            return np.asarray(self)[index]
        if stop <= start:
            return np.zeros(0, self.dtype)
        size = self.dtype.itemsize
        data = self.fs.cat_file(self.path, start=self._data_start + start * size, end=self._data_start + stop * size)
        return np.frombuffer(data, dtype=self.dtype)

    def __array__(self, dtype=None, copy=None):
        values = self[0:len(self)]
        return values if dtype is None else values.astype(dtype)

    def __iter__(self):
        chunk = 1 << 22
        for lo in range(0, len(self), chunk):
            yield from self[lo:lo + chunk]


@dataclass
class TokenSplit:
    """One split of a token cache as a single random-access token stream (memory-mapped locally)."""

    root: str
    split: str
    vocab_size: int
    eos_id: int
    tokens: list  # np.ndarray (memory-mapped) or RangeReadArray
    offsets: list[np.ndarray]
    doc_bytes: list[np.ndarray]

    @classmethod
    def open(cls, root: str | Path, split: str = "train") -> "TokenSplit":
        root = str(root)
        ledger = read_ledger(root)
        if split not in ledger["splits"]:
            raise KeyError(f"{root}: no split {split!r}; it has {sorted(ledger['splits'])}")
        shards = ledger["splits"][split]["shards"]
        load = lambda n, kind, ranged=False: load_array(join(root, split, f"{n}.{kind}.npy"), ranged=ranged)  # noqa: E731
        return cls(root, split, ledger["vocab_size"], ledger["eos_id"],
                   [load(s["name"], "tokens", ranged=True) for s in shards],
                   [load(s["name"], "offsets") for s in shards],
                   [load(s["name"], "bytes") for s in shards])

    @property
    def num_tokens(self) -> int:
        return int(sum(len(t) for t in self.tokens))

    @property
    def num_docs(self) -> int:
        return int(sum(len(b) for b in self.doc_bytes))

    @property
    def num_bytes(self) -> int:
        return int(sum(int(b.sum()) for b in self.doc_bytes))

    def window(self, start: int, length: int) -> np.ndarray:
        """tokens[start:start+length] of the concatenated stream, across shard boundaries."""
        out = np.empty(length, dtype=np.int64)
        filled, pos = 0, start
        for t in self.tokens:
            if pos >= len(t):
                pos -= len(t)
                continue
            take = min(len(t) - pos, length - filled)
            out[filled:filled + take] = t[pos:pos + take]
            filled += take
            pos = 0
            if filled == length:
                return out
        raise IndexError(f"window [{start}, {start + length}) is past the end ({self.num_tokens} tokens)")

    def documents(self):
        """Yield (token ids, utf8 byte length) per document, in stream order."""
        for t, off, b in zip(self.tokens, self.offsets, self.doc_bytes):
            for i in range(len(b)):
                yield np.asarray(t[off[i]:off[i + 1]]), int(b[i])
