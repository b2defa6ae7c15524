"""Fuzzy (near-duplicate) deduplication: MinHash + LSH, then verification by exact Jaccard.

1. Signatures, per input shard in parallel: MinHash over word n-gram shingles (minhash.py).
2. Candidates, in the driver: LSH with `num_bands` bands of `rows_per_band` rows; documents that
   share a band bucket become candidate pairs (each member with the bucket's first document, and
   all pairs within small buckets).
3. Verification: the exact Jaccard similarity of shingle sets (re-read from the input, for the
   candidate documents only) must reach `threshold` for a pair to count. Connected components
   (union-find) over verified pairs; the canonical document of a component is its first in the
   global order; a member is removed only if its own Jaccard with the canonical document also
   reaches `threshold`. Precision first: pages sharing boilerplate but not bodies stay: a document wrongly removed is data lost.
4. Write, per shard in parallel: sparse attributes and the kept documents (output.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from executor.engine.parallel import map_shards
from executor.engine.progress import Progress
from executor.core.step import execution_only
from steps.dedup.minhash import jaccard, make_permutations, minhash_signatures, shingle_hashes
from steps.dedup.output import ShardWrite, output_shard_names, write_dedup_shard, written_counts
from steps.documents import (OnBadLine, combined_stats, ReadStats, list_document_files, read_documents,
                             remove_stale_temporaries)

SMALL_BUCKET = 8  # buckets up to this size propose all their pairs, larger ones only head pairs


@dataclass(frozen=True)
class FuzzyDedupConfig:
    input_path: str
    output_path: str
    threshold: float = 0.8
    """Minimum exact Jaccard similarity of shingle sets for a document to count as a duplicate."""
    num_bands: int = 14
    rows_per_band: int = 8
    ngram: int = 5
    seed: int = 0
    """Seed of the MinHash hash functions."""
    on_bad_line: OnBadLine = "error"
    signature_batch_docs: int = execution_only(2000)
    num_cpus_per_shard: float = execution_only(1)

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"FuzzyDedupConfig.threshold={self.threshold!r}: use a Jaccard value in (0, 1]")
        for name in ("num_bands", "rows_per_band", "ngram"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"FuzzyDedupConfig.{name}={getattr(self, name)!r}: must be >= 1")


@dataclass
class _ShardSignatures:
    ids: list[str]
    signatures: np.ndarray    # [docs, bands * rows] uint32
    has_shingles: np.ndarray  # [docs] bool
    stats: ReadStats


def _signature_shard(job: tuple[str, FuzzyDedupConfig]) -> _ShardSignatures:
    path, config = job
    a, b = make_permutations(config.num_bands * config.rows_per_band, config.seed)
    stats = ReadStats()
    ids: list[str] = []
    batch: list[np.ndarray] = []
    parts: list[np.ndarray] = []
    for doc in read_documents(path, config.on_bad_line, stats):
        ids.append(doc["id"])
        batch.append(shingle_hashes(doc["text"], config.ngram))
        if len(batch) >= config.signature_batch_docs:
            parts.append(minhash_signatures(batch, a, b))
            batch = []
    if batch or not parts:
        parts.append(minhash_signatures(batch, a, b))
    signatures = np.concatenate(parts)
    has_shingles = ~(signatures == np.iinfo(np.uint32).max).all(axis=1) if len(ids) else np.zeros(0, bool)
    return _ShardSignatures(ids, signatures, has_shingles, stats)


def _shingle_sets(job: tuple[str, OnBadLine, int, list[int]]) -> dict[int, np.ndarray]:
    """Sorted unique shingle hashes of the wanted documents (by local index) of one shard."""
    path, on_bad_line, ngram, wanted = job
    wanted_set = set(wanted)
    out = {}
    for index, doc in enumerate(read_documents(path, on_bad_line)):
        if index in wanted_set:
            out[index] = np.unique(shingle_hashes(doc["text"], ngram))
    return out


def lsh_candidate_pairs(signatures: np.ndarray, eligible: np.ndarray, num_bands: int,
                        rows_per_band: int) -> np.ndarray:
    """[pairs, 2] int64 (i < j) of documents sharing at least one band bucket."""
    pairs = []
    index = np.nonzero(eligible)[0]
    for band in range(num_bands):
        rows = np.ascontiguousarray(signatures[index, band * rows_per_band:(band + 1) * rows_per_band])
        keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()
        _, labels, counts = np.unique(keys, return_inverse=True, return_counts=True)
        labels = labels.ravel()
        in_group = counts[labels] > 1
        if not in_group.any():
            continue
        members, member_labels = index[in_group], labels[in_group]
        order = np.argsort(member_labels, kind="stable")   # within a bucket: global order
        members, member_labels = members[order], member_labels[order]
        starts = np.r_[True, member_labels[1:] != member_labels[:-1]]
        head = members[np.maximum.accumulate(np.where(starts, np.arange(len(members)), 0))]
        not_head = ~starts
        pairs.append(np.stack([head[not_head], members[not_head]], axis=1))
        group_start = np.nonzero(starts)[0]
        group_size = np.diff(np.r_[group_start, len(members)])
        for s, n in zip(group_start[(group_size > 2) & (group_size <= SMALL_BUCKET)],
                        group_size[(group_size > 2) & (group_size <= SMALL_BUCKET)]):
            pairs.append(np.array(list(combinations(members[s:s + n], 2)), np.int64))
    if not pairs:
        return np.zeros((0, 2), np.int64)
    return np.unique(np.concatenate(pairs).astype(np.int64), axis=0)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent.get(x, x)
        return root

    def union(self, x: int, y: int) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:  # the smaller global index becomes the root: it is the canonical document
            self.parent[max(rx, ry)] = min(rx, ry)


def fuzzy_dedup(config: FuzzyDedupConfig) -> dict[str, Any]:
    files = list_document_files(config.input_path)
    remove_stale_temporaries(config.output_path)
    shards = map_shards(_signature_shard, [(f, config) for f in files], desc="fuzzy-dedup: minhash",
                        num_cpus=config.num_cpus_per_shard)
    stats = combined_stats([s.stats for s in shards], config.input_path, len(files))
    starts = np.cumsum([0] + [len(s.ids) for s in shards])
    all_ids = [i for s in shards for i in s.ids]
    signatures = np.concatenate([s.signatures for s in shards])
    eligible = np.concatenate([s.has_shingles for s in shards])
    candidates = lsh_candidate_pairs(signatures, eligible, config.num_bands, config.rows_per_band)

    # Exact shingle sets of the candidate documents, re-read shard by shard.
    needed = np.unique(candidates)
    shard_of = np.searchsorted(starts, needed, side="right") - 1
    shards_with_candidates = [k for k in range(len(files)) if (shard_of == k).any()]
    jobs = [(files[k], config.on_bad_line, config.ngram, [int(g - starts[k]) for g in needed[shard_of == k]])
            for k in shards_with_candidates]
    shingle_sets: dict[int, np.ndarray] = {}
    found_per_shard = map_shards(_shingle_sets, jobs, desc="fuzzy-dedup: shingles", num_cpus=config.num_cpus_per_shard)
    for k, found in zip(shards_with_candidates, found_per_shard):
        shingle_sets.update({int(starts[k]) + local: s for local, s in found.items()})

    similarity: dict[tuple[int, int], float] = {}
    components = _UnionFind()
    progress = Progress("fuzzy-dedup: verify pairs", total=len(candidates), unit="pairs")
    for i, j in candidates.tolist():
        similarity[(i, j)] = jaccard(shingle_sets[i], shingle_sets[j])
        if similarity[(i, j)] >= config.threshold:
            components.union(i, j)
        progress.update()
    progress.close()
    verified_pairs = sum(v >= config.threshold for v in similarity.values())

    duplicate_of: dict[int, tuple[int, float]] = {}
    rejected_members = 0
    for member in list(components.parent):
        canonical = components.find(member)
        if canonical == member:
            continue
        pair = (canonical, member)
        if pair not in similarity:
            similarity[pair] = jaccard(shingle_sets[canonical], shingle_sets[member])
        if similarity[pair] >= config.threshold:
            duplicate_of[member] = (canonical, similarity[pair])
        else:
            rejected_members += 1

    writes = []
    for k, (path, name) in enumerate(zip(files, output_shard_names(files))):
        attributes = [{"index": int(g - starts[k]), "id": all_ids[g], "duplicate_of": all_ids[c],
                       "reason": "fuzzy_document", "jaccard": round(sim, 4)}
                      for g, (c, sim) in sorted(duplicate_of.items()) if starts[k] <= g < starts[k + 1]]
        writes.append(ShardWrite(path, config.output_path, name, attributes, config.on_bad_line))
    written = map_shards(write_dedup_shard, writes, desc="fuzzy-dedup: write", num_cpus=config.num_cpus_per_shard)

    return {
        **written_counts(stats, written, files),
        "duplicate_documents": len(duplicate_of),
        "candidate_pairs": len(candidates),
        "verified_pairs": int(verified_pairs),
        "rejected_pairs": len(candidates) - int(verified_pairs),
        "rejected_component_members": rejected_members,
        "documents_without_words": int((~eligible).sum()),
    }
