"""The output side shared by the dedup steps: one kept-documents shard + one attribute shard per input.

Layout of a dedup step's output directory:

    docs/<shard>.jsonl.zst         kept documents, in input order (.parquet with output_format="parquet");
                                   lines copied as they were when the step passes `text_bytes_in`
    attributes/<shard>.jsonl.zst   what was removed and why (see attributes.py)
    shards/<shard>.json            commit marker with the shard's counts, written last

A shard whose marker exists is not written again when the step is re-run (resume). A shard is a
whole input file or, for a big one, a piece of it (steps.documents.DocumentShard).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import hashlib
from typing import Iterator

import numpy as np

from steps.dedup.attributes import apply_attribute, filter_documents
from steps.documents import (BLOCK_BYTES, DocumentShard, OnBadLine, ReadStats, decompressed_blocks, dumps_document, parse_document,
                             read_json, read_shard, read_shard_lines, write_documents, write_json_atomically,
                             write_json_lines, write_line_blocks)

OUTPUT_FORMATS = ("jsonl.zst", "parquet")


def check_output_format(step: str, value: str) -> None:
    if value not in OUTPUT_FORMATS:
        raise ValueError(f"{step}.output_format={value!r}: use one of {', '.join(map(repr, OUTPUT_FORMATS))}")


@dataclass
class ShardWrite:
    """Everything needed to write one shard's outputs (picklable, travels to a worker)."""

    shard: DocumentShard
    output_path: str
    name: str
    attributes: list[dict[str, Any]] = field(default_factory=list)
    on_bad_line: OnBadLine = "error"
    output_format: str = "jsonl.zst"
    text_bytes_in: int | None = None
    """The UTF-8 bytes of the shard's texts, from an earlier pass that found every line a valid
    document with a string id; with it, a JSONL shard's untouched documents are copied byte for
    byte instead of parsed and written again."""
    zstd_level: int = 3
    """The zstd level of the kept documents (`.jsonl.zst`); the attributes are written at 3."""

    @property
    def marker(self) -> str:
        return f"{self.output_path}/shards/{self.name}.json"

    @property
    def copies_lines(self) -> bool:
        return (self.text_bytes_in is not None and not self.shard.path.endswith(".parquet")
                and self.output_format == "jsonl.zst")


def text_bytes_if_clean(stats: dict[str, Any], text_bytes: int | None) -> int | None:
    """A shard's text bytes when its first pass found every line a document with a string id (so its
    lines may be copied as they are, see `ShardWrite.text_bytes_in`), else None. None too for a
    marker written before `text_bytes` was recorded."""
    clean = stats["skipped_lines"] == 0 and stats.get("numeric_ids", 1) == 0
    return text_bytes if clean else None


def write_dedup_shard(job: ShardWrite) -> dict[str, Any]:
    """Write attributes, then kept documents, then the commit marker; skip a committed shard."""
    return write_dedup_shard_hashed(job)[0]


def write_dedup_shard_hashed(job: ShardWrite) -> tuple[dict[str, Any], dict[str, str]]:
    """`write_dedup_shard`, and the sha256 of each file it wrote (relative to the output), hashed as
    they were written (none when the shard was committed already)."""
    committed = read_json(job.marker)
    if committed is not None:
        return {**committed, "resumed": True}, {}
    attributes_rel, docs_rel = f"attributes/{job.name}.jsonl.zst", f"docs/{job.name}.{job.output_format}"
    digests = {attributes_rel: hashlib.sha256()}
    write_documents(f"{job.output_path}/{attributes_rel}", job.attributes, sha256=digests[attributes_rel])
    docs_path = f"{job.output_path}/{docs_rel}"
    if job.copies_lines and job.shard.whole_file:
        digests[docs_rel] = hashlib.sha256()
        docs_out, out_bytes = _copy_kept_blocks(job, docs_path, digests[docs_rel])
    elif job.copies_lines:
        docs_out, out_bytes = _copy_kept_lines(job, docs_path)
    else:
        docs_out, out_bytes = _rewrite_kept_documents(job, docs_path)
    result = {"shard": job.name, "documents_out": docs_out, "text_bytes_out": out_bytes}
    write_json_atomically(job.marker, {"schema": 1, **result})
    return {**result, "resumed": False}, {rel: h.hexdigest() for rel, h in digests.items()}


def _rewrite_kept_documents(job: ShardWrite, docs_path: str) -> tuple[int, int]:
    """Parse every document, apply attributes, write what is kept: (documents, text bytes) written."""
    stats = ReadStats()
    out_bytes = 0

    def kept_docs():
        nonlocal out_bytes
        for doc in filter_documents(read_shard(job.shard, job.on_bad_line, stats), job.attributes):
            out_bytes += len(doc["text"].encode("utf-8"))
            yield doc

    return write_documents(docs_path, kept_docs(), job.zstd_level), out_bytes


def _copy_kept_lines(job: ShardWrite, docs_path: str) -> tuple[int, int]:
    """Copy the lines of untouched documents as they are; parse only those with an attribute."""
    assert job.text_bytes_in is not None
    by_index = {a["index"]: a for a in job.attributes}
    removed_bytes = 0

    def kept_lines():
        nonlocal removed_bytes
        for index, line in enumerate(read_shard_lines(job.shard)):
            attribute = by_index.get(index)
            if attribute is None:
                yield line.rstrip(b"\r\n")
                continue
            doc = parse_document(line, f"{job.shard.path} document {index}")
            kept = apply_attribute(doc, attribute)
            removed_bytes += len(doc["text"].encode("utf-8")) - (len(kept["text"].encode("utf-8")) if kept else 0)
            if kept is not None:
                yield dumps_document(kept)

    docs_out = write_json_lines(docs_path, kept_lines(), job.zstd_level)
    return docs_out, job.text_bytes_in - removed_bytes


_BLOCK_BYTES = BLOCK_BYTES
_SPACE = np.frombuffer(b" \t\n\r\x0b\x0c", np.uint8)
"""The bytes `bytes.strip` removes: a line starting with one may be blank (`read_shard_lines` skips
it); a block holding one of those or a carriage return (dropped from a line's end) is copied line by line."""


def _line_blocks(path: str) -> Iterator[bytes]:
    """The decompressed bytes of a whole file in blocks of about 1 MiB of whole lines, each ending in
    a newline (one is added after a last line without it)."""
    for block in decompressed_blocks(path, _BLOCK_BYTES):
        yield block if block.endswith(b"\n") else block + b"\n"


def _copy_kept_blocks(job: ShardWrite, docs_path: str, sha256: Any) -> tuple[int, int]:
    """`_copy_kept_lines` of a whole file a block of lines at a time: the bytes between documents
    that have an attribute are copied as one piece, with no Python work per line (the same file)."""
    assert job.text_bytes_in is not None
    by_index = {a["index"]: a for a in job.attributes}
    touched = np.array(sorted(by_index), dtype=np.int64)
    counts = {"lines": 0, "removed_docs": 0, "removed_bytes": 0}
    blocks = (_kept_block(job, by_index, touched, counts, block) for block in _line_blocks(job.shard.path))
    write_line_blocks(docs_path, blocks, job.zstd_level, sha256)
    return counts["lines"] - counts["removed_docs"], job.text_bytes_in - counts["removed_bytes"]


def _kept_block(job: ShardWrite, by_index: dict[int, dict[str, Any]], touched: np.ndarray, counts: dict[str, int],
                block: bytes) -> bytes:
    """What is kept of a block of lines (`_line_blocks`) whose first line is line `counts["lines"]`."""
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == 10)
    first = counts["lines"]
    if b"\r" in block or np.isin(data[np.r_[0, ends[:-1] + 1]], _SPACE).any():  # a blank line maybe
        lines = [line.rstrip(b"\r") for line in block.split(b"\n")[:-1] if line.strip()]
        counts["lines"] += len(lines)
        kept = (_kept_line(job, by_index, counts, line, first + i) for i, line in enumerate(lines))
        return b"".join(line + b"\n" for line in kept if line is not None)
    lo, hi = np.searchsorted(touched, [first, first + len(ends)])
    pieces, position = [], 0
    for index in touched[lo:hi].tolist():
        start, end = (int(ends[index - first - 1]) + 1 if index > first else 0), int(ends[index - first]) + 1
        kept = _kept_line(job, by_index, counts, block[start:end - 1], index)
        pieces += [block[position:start], b"" if kept is None else kept + b"\n"]
        position = end
    pieces.append(block[position:])
    counts["lines"] += len(ends)
    return b"".join(pieces)


def _kept_line(job: ShardWrite, by_index: dict[int, dict[str, Any]], counts: dict[str, int], line: bytes,
               index: int) -> bytes | None:
    """Line `index` as it is copied: as stored when it has no attribute, else written again with its
    attribute applied; None when its document is removed."""
    attribute = by_index.get(index)
    if attribute is None:
        return line
    doc = parse_document(line, f"{job.shard.path} document {index}")
    kept = apply_attribute(doc, attribute)
    counts["removed_bytes"] += len(doc["text"].encode("utf-8")) - (len(kept["text"].encode("utf-8")) if kept else 0)
    if kept is None:
        counts["removed_docs"] += 1
        return None
    return dumps_document(kept)


def written_counts(stats: ReadStats, written: list[dict[str, Any]], files: list) -> dict[str, Any]:
    """The counts every dedup step reports: documents in and out, bytes, skips and shards resumed."""
    return {
        "documents_in": stats.documents,
        "documents_out": sum(w["documents_out"] for w in written),
        "input_bytes": stats.bytes,
        "text_bytes_out": sum(w["text_bytes_out"] for w in written),
        "skipped_lines": stats.skipped_lines,
        "skipped_examples": stats.skip_examples,
        "shards": len(files),
        "shards_resumed": sum(bool(w["resumed"]) for w in written),
    }
