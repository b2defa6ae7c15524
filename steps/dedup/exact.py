"""Exact deduplication of documents (and optionally of repeated lines/paragraphs) with xxh3-128.

1. Hash, per input shard in parallel: xxh3-128 of every document's text (and of every line of
   at least `min_paragraph_chars` characters when `paragraphs=True`).
2. Decide, in the driver: the canonical copy of each text is its first occurrence in the global
   order (input files sorted by path, then line order), so the result does not depend on how
   many shards or workers there are. Paragraph dedup runs over the documents that survive.
3. Write, per shard in parallel: sparse attributes and the kept documents (see output.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from executor.engine.parallel import map_shards
from executor.core.step import execution_only
from steps.dedup.output import ShardWrite, output_shard_names, write_dedup_shard, written_counts
from steps.documents import (OnBadLine, combined_stats, ReadStats, list_document_files, read_documents,
                             remove_stale_temporaries)


@dataclass(frozen=True)
class ExactDedupConfig:
    input_path: str
    output_path: str
    documents: bool = True
    """Remove documents whose whole text appeared earlier."""
    paragraphs: bool = False
    """Also remove lines that appeared earlier (in any surviving document); off by default."""
    min_paragraph_chars: int = 50
    """Lines shorter than this (after stripping) are never removed as duplicates."""
    on_bad_line: OnBadLine = "error"
    num_cpus_per_shard: float = execution_only(1)


@dataclass
class _ShardHashes:
    ids: list[str]
    doc_hashes: np.ndarray        # [docs, 16] uint8: xxh3-128 digests
    para_hashes: np.ndarray       # [paragraphs, 16] uint8
    para_docs: np.ndarray         # [paragraphs] int64: local document index
    para_lines: np.ndarray        # [paragraphs] int64: line index within the document
    stats: ReadStats


def _hash_shard(job: tuple[str, OnBadLine, bool, int]) -> _ShardHashes:
    path, on_bad_line, paragraphs, min_chars = job
    stats = ReadStats()
    ids: list[str] = []
    digests = bytearray()
    para_digests = bytearray()
    para_docs: list[int] = []
    para_lines: list[int] = []
    digest = xxhash.xxh3_128_digest
    for index, doc in enumerate(read_documents(path, on_bad_line, stats)):
        ids.append(doc["id"])
        text = doc["text"]
        digests += digest(text.encode("utf-8"))
        if paragraphs:
            for line_index, line in enumerate(text.split("\n")):
                if len(line.strip()) >= min_chars:
                    para_digests += digest(line.encode("utf-8"))
                    para_docs.append(index)
                    para_lines.append(line_index)
    return _ShardHashes(ids, np.frombuffer(bytes(digests), np.uint8).reshape(-1, 16),
                        np.frombuffer(bytes(para_digests), np.uint8).reshape(-1, 16),
                        np.asarray(para_docs, np.int64), np.asarray(para_lines, np.int64), stats)


def first_occurrence(digests: np.ndarray) -> np.ndarray:
    """For each row of a [n, 16] digest array, the index of the first row with the same digest."""
    if len(digests) == 0:
        return np.zeros(0, np.int64)
    keys = np.ascontiguousarray(digests).view(np.dtype((np.void, 16))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.ravel()]


def _line_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each line, the end including the newline that follows it."""
    spans, start = [], 0
    for line in text.split("\n"):
        end = start + len(line)
        spans.append((start, min(end + 1, len(text))))
        start = end + 1
    return spans


def exact_dedup(config: ExactDedupConfig) -> dict[str, Any]:
    files = list_document_files(config.input_path)
    remove_stale_temporaries(config.output_path)
    shards = map_shards(_hash_shard, [(f, config.on_bad_line, config.paragraphs, config.min_paragraph_chars)
                                      for f in files],
                        desc="exact-dedup: hash", num_cpus=config.num_cpus_per_shard)
    stats = combined_stats([s.stats for s in shards], config.input_path, len(files))
    starts = np.cumsum([0] + [len(s.ids) for s in shards])
    all_ids = [i for s in shards for i in s.ids]

    # Documents: the first occurrence of each text is canonical.
    doc_digests = np.concatenate([s.doc_hashes for s in shards])
    canonical = first_occurrence(doc_digests) if config.documents else np.arange(len(all_ids))
    removed_doc = canonical != np.arange(len(canonical))

    # Paragraphs: first occurrence among the documents that survive.
    para_removals: dict[int, list[tuple[int, int]]] = {}
    if config.paragraphs:
        para_global_doc = np.concatenate([s.para_docs + starts[k] for k, s in enumerate(shards)])
        para_lines = np.concatenate([s.para_lines for s in shards])
        para_digests = np.concatenate([s.para_hashes for s in shards])
        alive = ~removed_doc[para_global_doc] if len(para_global_doc) else np.zeros(0, bool)
        para_global_doc, para_lines, para_digests = para_global_doc[alive], para_lines[alive], para_digests[alive]
        first = first_occurrence(para_digests)
        for j in np.nonzero(first != np.arange(len(first)))[0]:
            para_removals.setdefault(int(para_global_doc[j]), []).append(
                (int(para_lines[j]), int(para_global_doc[first[j]])))

    jobs = []
    names = output_shard_names(files)
    removed_paragraphs = 0
    for k, (path, name) in enumerate(zip(files, names)):
        attributes = []
        texts_needed = {g - starts[k] for g in para_removals if starts[k] <= g < starts[k + 1]}
        spans_by_doc = _paragraph_spans(path, config.on_bad_line, texts_needed) if texts_needed else {}
        for g in range(starts[k], starts[k + 1]):
            local = int(g - starts[k])
            if removed_doc[g]:
                attributes.append({"index": local, "id": all_ids[g], "duplicate_of": all_ids[canonical[g]],
                                   "reason": "exact_document"})
            elif g in para_removals:
                spans = spans_by_doc[local]
                removed = [[spans[line][0], spans[line][1], all_ids[c]] for line, c in para_removals[g]]
                removed_paragraphs += len(removed)
                attributes.append({"index": local, "id": all_ids[g], "duplicate_spans": removed,
                                   "reason": "exact_paragraph"})
        jobs.append(ShardWrite(path, config.output_path, name, attributes, config.on_bad_line))
    written = map_shards(write_dedup_shard, jobs, desc="exact-dedup: write", num_cpus=config.num_cpus_per_shard)

    return {**written_counts(stats, written, files),
            "duplicate_documents": int(removed_doc.sum()), "duplicate_paragraphs": removed_paragraphs}


def _paragraph_spans(path: str, on_bad_line: OnBadLine, wanted: set[int]) -> dict[int, list[tuple[int, int]]]:
    return {i: _line_spans(doc["text"]) for i, doc in enumerate(read_documents(path, on_bad_line))
            if i in wanted}
