"""Fuzzy (near-duplicate) deduplication: MinHash + LSH, verification by exact Jaccard, as shuffles.

Stages (each a set of resumable tasks exchanging Arrow files under `<output>/.work/fuzzy/`; the
driver holds one small dict per shard, per partition and per round, never per document):
1. minhash (per shard): MinHash over word n-gram shingles (minhash.py); one 64-bit key per
   (band, band rows) of each document, written partitioned by key.
2. lsh (per partition): documents sharing a key are candidate pairs (each member with the
   bucket's first document in global order, and all pairs within small buckets), written
   partitioned by pair; each pair's two documents are requested from their shards.
3. shingles (per shard): the exact shingle sets of the requested documents, sent to the
   partitions that asked (a shard whose lines were all documents parses only those lines, and
   reads no further than the last); verify (per pair partition): exact Jaccard >= `threshold`
   makes an edge, which keeps its Jaccard and its documents' ids.
4. components: min-label propagation over the edge files, one round per stage, until no label
   changes; a component's label is its first document in the global order (its canonical copy).
5. check: a member is removed only if its own Jaccard with the canonical document reaches
   `threshold`; precision first: pages sharing boilerplate stay (a document wrongly removed is data
   lost). A member with a verified edge to its canonical document (most of them) is decided by that
   edge; the other pairs go through shingles + verify again.
6. write (per shard): sparse attributes and the kept documents (output.py); untouched JSONL lines
   are copied as they are when the minhash pass found every line of the shard a document.
The result does not depend on shard, partition or worker counts.
Incremental (fuzzy_reuse.py): each shard's band keys (`minhash/<shard>.arrow`) and written outputs
are addressed by the settings, this code and the shard's bytes; a run under a new id reuses them
from earlier outputs of the step, so a grown corpus computes signatures for its new or changed
shards only, and every later stage sees the whole corpus (the kept set is a full run's).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from itertools import combinations
from contextlib import closing
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from executor import execution_only
from steps import documents
from steps.dedup import attributes as attributes_module
from steps.dedup import fuzzy_reuse, minhash, output, shuffle
from steps.dedup.minhash import batch_signatures, jaccard, make_permutations, shingle_batch, unique_per_text
from steps.dedup.output import ShardWrite, check_output_format, text_bytes_if_clean, written_counts
from steps.dedup.shuffle import (choose_partitions, list_column, nodes_per_stage, numpy_column, read_partition,
                                 remove_tree, run_stage, string_column, write_partitioned)
from steps.documents import (DocumentShard, OnBadLine, ReadStats, combined_stats, list_document_files,
                             parse_document, plan_document_shards, read_shard, read_shard_lines,
                             remove_stale_temporaries, shard_names)

SMALL_BUCKET = 8  # buckets up to this size propose all their pairs, larger ones only head pairs
MAX_ROUNDS = 10_000
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


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
    text_column: str = "text"
    """Parquet inputs: the column holding the document text."""
    id_column: str = "id"
    """Parquet inputs: the column holding the document id."""
    output_format: str = "jsonl.zst"
    """Kept documents as "jsonl.zst" or "parquet"."""
    signature_batch_docs: int = execution_only(2000)
    shard_bytes: int = execution_only(256 << 20)
    """Input files larger than this are read as several shards (uncompressed JSONL, Parquet)."""
    partition_bytes: int = execution_only(16 << 20)
    """Input bytes per shuffle partition: bounds the memory of a reduce or verify task."""
    num_cpus_per_shard: float = execution_only(1)

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"FuzzyDedupConfig.threshold={self.threshold!r}: use a Jaccard value in (0, 1]")
        for name in ("num_bands", "rows_per_band", "ngram"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"FuzzyDedupConfig.{name}={getattr(self, name)!r}: must be >= 1")
        check_output_format("FuzzyDedupConfig", self.output_format)


KEY_SCHEMA = pa.schema([("key", pa.uint64()), ("shard", pa.int32()), ("index", pa.int64())])
PAIR_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64())])
REQUEST_SCHEMA = pa.schema([("index", pa.int64()), ("target", pa.int64())])
SHINGLE_SCHEMA = pa.schema([("gid", pa.int64()), ("id", pa.string()), ("shingles", pa.list_(pa.uint64()))])
EDGE_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])
VERIFIED_EDGE_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64()), ("jaccard", pa.float64()),
                                  ("u_id", pa.string()), ("v_id", pa.string())])
LABEL_SCHEMA = pa.schema([("node", pa.int64()), ("label", pa.int64())])
REMOVAL_SCHEMA = pa.schema([("index", pa.int64()), ("id", pa.string()), ("duplicate_of", pa.string()),
                            ("jaccard", pa.float64())])


def _mix(x: np.ndarray) -> np.ndarray:
    """murmur3's fmix64: spreads keys evenly over partitions."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _S33)
        x = x * _M1
        x = x ^ (x >> _S33)
        x = x * _M2
        return x ^ (x >> _S33)


def band_keys(signatures: np.ndarray, num_bands: int, rows_per_band: int) -> np.ndarray:
    """[docs, bands] uint64: one key per band, equal when the band's rows are equal (and the band too)."""
    keys = np.empty((len(signatures), num_bands), np.uint64)
    with np.errstate(over="ignore"):
        for band in range(num_bands):
            acc = np.full(len(signatures), np.uint64(band + 1) * np.uint64(0x9E3779B97F4A7C15), np.uint64)
            for r in range(rows_per_band):
                acc = _mix(acc ^ signatures[:, band * rows_per_band + r].astype(np.uint64))
            keys[:, band] = acc
    return keys


def bucket_pairs(keys: np.ndarray, members: np.ndarray) -> np.ndarray:
    """[pairs, 2] (i < j) of members sharing a key: each with its bucket's first member, and all
    pairs within buckets of up to SMALL_BUCKET members. `members` are global document positions."""
    order = np.lexsort((members, keys))
    keys, members = keys[order], members[order]
    starts = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.zeros(0, bool)
    group_start = np.nonzero(starts)[0]
    group_size = np.diff(np.r_[group_start, len(keys)])
    in_group = np.repeat(group_size > 1, group_size)
    head = members[np.repeat(group_start, group_size)]
    pairs = [np.stack([head[in_group & ~starts], members[in_group & ~starts]], axis=1)]
    small = (group_size > 2) & (group_size <= SMALL_BUCKET)
    for s, n in zip(group_start[small], group_size[small]):
        pairs.append(np.array(list(combinations(members[s:s + n], 2)), np.int64))
    found = np.concatenate(pairs).astype(np.int64) if pairs else np.zeros((0, 2), np.int64)
    found = found[found[:, 0] != found[:, 1]]
    return unique_pairs(found)


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """`np.unique(pairs, axis=0)` of [n, 2] int64 rows: the same sorted rows, by a 1-d sort of one
    key per row when both columns fit in 32 bits (`axis=0` sorts the rows as opaque records, ~10x slower)."""
    if len(pairs) == 0:
        return np.zeros((0, 2), np.int64)
    if pairs.min() < 0 or pairs.max() >= 1 << 32:
        return np.unique(pairs, axis=0)
    keys = np.unique((pairs[:, 0].astype(np.uint64) << np.uint64(32)) | pairs[:, 1].astype(np.uint64))
    return np.stack([(keys >> np.uint64(32)).astype(np.int64), (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)], axis=1)


def lsh_candidate_pairs(signatures: np.ndarray, eligible: np.ndarray, num_bands: int,
                        rows_per_band: int) -> np.ndarray:
    """[pairs, 2] int64 (i < j) of documents sharing at least one band bucket (one process)."""
    index = np.nonzero(eligible)[0]
    keys = band_keys(signatures[index], num_bands, rows_per_band)
    return bucket_pairs(keys.ravel(), np.repeat(index, num_bands))


@dataclass
class _Plan:
    work: str
    shards: list[DocumentShard]
    num_partitions: int
    config: FuzzyDedupConfig
    starts: np.ndarray | None = None   # [shards + 1] global position of each shard's first document
    text_bytes: list[int | None] | None = None  # per shard: its text bytes when every line was a document
    reuse: fuzzy_reuse.FuzzyReuse | None = None

    def shard_of(self, gids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, gids, side="right") - 1

    def partition(self, values: np.ndarray) -> np.ndarray:
        return (_mix(values.astype(np.uint64)) % np.uint64(self.num_partitions)).astype(np.int64)


def _minhash(job: tuple[_Plan, int]) -> dict:
    plan, k = job
    if plan.reuse is None:
        result, key, index = _band_keys_of_shard(plan, k)
    else:  # reused, or computed under the shard's claim (fuzzy_reuse.band_keys)
        result, key, index = fuzzy_reuse.band_keys(plan.reuse, plan.config, k, lambda: _band_keys_of_shard(plan, k))
    shuffled = write_partitioned(f"{plan.work}/keys", {"key": key, "shard": np.full(len(key), k, np.int32),
                                                       "index": index},
                                 plan.partition(key), plan.num_partitions, f"{k:06d}")
    return {**result, "bytes_shuffled": shuffled}


def _band_keys_of_shard(plan: _Plan, k: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """(counts, band keys, each key's document index) of shard k: one key per band of each
    document with words."""
    config = plan.config
    a, b = make_permutations(config.num_bands * config.rows_per_band, config.seed)
    stats = ReadStats()
    batch: list[str] = []
    keys, indexes = [], []
    count = without_words = text_bytes = 0

    def flush() -> None:
        nonlocal without_words
        signatures = batch_signatures(*shingle_batch(batch, config.ngram), a, b)
        eligible = np.nonzero(~(signatures == np.iinfo(np.uint32).max).all(axis=1))[0]
        without_words += len(batch) - len(eligible)
        keys.append(band_keys(signatures[eligible], config.num_bands, config.rows_per_band).ravel())
        indexes.append(np.repeat(eligible + (count - len(batch)), config.num_bands))

    for doc in read_shard(plan.shards[k], config.on_bad_line, stats):
        text = doc["text"]
        text_bytes += len(text) if text.isascii() else len(text.encode("utf-8"))  # isascii: O(1)
        batch.append(text)
        count += 1
        if len(batch) >= config.signature_batch_docs:
            flush()
            batch = []
    if batch:
        flush()
    key = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    index = np.concatenate(indexes).astype(np.int64) if indexes else np.zeros(0, np.int64)
    return ({"stats": dataclasses.asdict(stats), "documents": count, "without_words": without_words,
             "text_bytes": text_bytes}, key, index)


def _send_pairs(plan: _Plan, stage: str, pairs: np.ndarray, name: str) -> int:
    """Write pairs partitioned by pair, and each endpoint's request to its shard."""
    if len(pairs) == 0:
        return 0
    target = plan.partition(pairs[:, 0] * np.int64(1_000_003) + pairs[:, 1])
    written = write_partitioned(f"{plan.work}/{stage}/pairs", {"a": pairs[:, 0], "b": pairs[:, 1]}, target,
                                plan.num_partitions, name)
    gids = np.concatenate([pairs[:, 0], pairs[:, 1]])
    requests = unique_pairs(np.stack([gids, np.concatenate([target, target])], axis=1))
    shard = plan.shard_of(requests[:, 0])
    written += write_partitioned(f"{plan.work}/{stage}/requests",
                                 {"index": requests[:, 0] - plan.starts[shard], "target": requests[:, 1]},
                                 shard, len(plan.shards), name)
    return written


def _lsh(job: tuple[_Plan, int]) -> dict:
    plan, p = job
    table = read_partition(f"{plan.work}/keys", p, KEY_SCHEMA)
    shard, index = numpy_column(table, "shard"), numpy_column(table, "index")
    pairs = bucket_pairs(numpy_column(table, "key"), plan.starts[shard] + index)
    return {"bytes_shuffled": _send_pairs(plan, "candidates", pairs, f"{p:05d}")}


def _shingles(job: tuple[_Plan, str, int]) -> dict:
    """The shingle sets of the documents of shard k that some pair partition asked for."""
    plan, stage, k = job
    requests = read_partition(f"{plan.work}/{stage}/requests", k, REQUEST_SCHEMA)
    if requests.num_rows == 0:
        return {"bytes_shuffled": 0}
    wanted: dict[int, list[int]] = {}
    for index, target in zip(numpy_column(requests, "index").tolist(), numpy_column(requests, "target").tolist()):
        wanted.setdefault(index, []).append(target)
    gids, ids, shingles, targets = [], [], [], []
    batch: list[tuple[int, dict]] = []

    def flush() -> None:  # shingles of a batch of documents at once; texts held one batch at a time
        sets = unique_per_text(*shingle_batch([doc["text"] for _, doc in batch], plan.config.ngram))
        for (index, doc), sorted_unique in zip(batch, sets):
            for target in wanted[index]:
                gids.append(int(plan.starts[k]) + index)
                ids.append(doc["id"])
                shingles.append(sorted_unique)
                targets.append(target)
        batch.clear()

    for found in _wanted_documents(plan, k, wanted):
        batch.append(found)
        if len(batch) >= plan.config.signature_batch_docs:
            flush()
    flush()
    columns = {"gid": np.asarray(gids, np.int64), "id": ids, "shingles": shingles}
    return {"bytes_shuffled": write_partitioned(f"{plan.work}/{stage}/shingles", columns,
                                                np.asarray(targets, np.int64), plan.num_partitions, f"{k:06d}")}


def _wanted_documents(plan: _Plan, k: int, wanted: dict[int, Any]) -> Iterator[tuple[int, dict]]:
    """(index, document) of the wanted documents of shard k, in order, reading no further than the
    last one. When the minhash pass found every line a document, only the wanted lines are parsed."""
    shard, last = plan.shards[k], max(wanted)
    if plan.text_bytes[k] is not None and not shard.path.endswith(".parquet"):
        where = f"{shard.path} document"
        documents = (parse_document(line, f"{where} {i}") if i in wanted else None
                     for i, line in enumerate(read_shard_lines(shard)))
    else:
        documents = read_shard(shard, plan.config.on_bad_line)
    with closing(documents):
        for index, doc in enumerate(documents):
            if index in wanted:
                yield index, doc
            if index >= last:
                return


def _pairs_with_similarity(plan: _Plan, stage: str, q: int) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    pairs = read_partition(f"{plan.work}/{stage}/pairs", q, PAIR_SCHEMA)
    if pairs.num_rows == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0), {}
    unique = unique_pairs(np.stack([numpy_column(pairs, "a"), numpy_column(pairs, "b")], axis=1))
    found = read_partition(f"{plan.work}/{stage}/shingles", q, SHINGLE_SCHEMA)
    gids = numpy_column(found, "gid").tolist()
    sets = dict(zip(gids, list_column(found, "shingles")))
    ids = dict(zip(gids, string_column(found, "id")))
    similarity = np.array([jaccard(sets[a], sets[b]) for a, b in unique.tolist()])
    return unique, similarity, ids


def _verify(job: tuple[_Plan, int]) -> dict:
    """Exact Jaccard of the candidate pairs of partition q; edges at or above the threshold."""
    plan, q = job
    pairs, similarity, ids = _pairs_with_similarity(plan, "candidates", q)
    verified = similarity >= plan.config.threshold if len(pairs) else np.zeros(0, bool)
    edges = pairs[verified]
    both = np.concatenate([edges, edges[:, ::-1]])
    columns = {"u": both[:, 0], "v": both[:, 1], "jaccard": np.tile(similarity[verified], 2),
               "u_id": [ids[g] for g in both[:, 0].tolist()], "v_id": [ids[g] for g in both[:, 1].tolist()]}
    shuffled = write_partitioned(f"{plan.work}/edges", columns, plan.partition(both[:, 0]), plan.num_partitions,
                                 f"{q:05d}")
    return {"candidate_pairs": int(len(pairs)), "verified_pairs": int(len(edges)), "bytes_shuffled": shuffled}


def _propagate(job: tuple[_Plan, int, int]) -> dict:
    """One round of min-label propagation for the nodes of partition p.

    Round 0 starts every node at its own position; a later round takes the smallest of its label
    and the labels its neighbours sent. Nodes whose label dropped send it to their neighbours."""
    plan, r, p = job
    edges = read_partition(f"{plan.work}/edges", p, EDGE_SCHEMA)
    u, v = numpy_column(edges, "u"), numpy_column(edges, "v")
    if r == 0:
        nodes = np.unique(u)
        old = nodes.copy()
        new = nodes.copy()
        changed_nodes = nodes
    else:
        labels = read_partition(f"{plan.work}/labels-{r - 1:05d}", p, LABEL_SCHEMA)
        nodes, old = numpy_column(labels, "node"), numpy_column(labels, "label")
        messages = read_partition(f"{plan.work}/messages-{r - 1:05d}", p, LABEL_SCHEMA)
        new = old.copy()
        if messages.num_rows:
            at = np.searchsorted(nodes, numpy_column(messages, "node"))
            np.minimum.at(new, at, numpy_column(messages, "label"))
        changed_nodes = nodes[new < old]
    shuffled = write_partitioned(f"{plan.work}/labels-{r:05d}", {"node": nodes, "label": new},
                                 np.full(len(nodes), p, np.int64) if len(nodes) else np.zeros(0, np.int64),
                                 plan.num_partitions, "labels")
    send = np.isin(u, changed_nodes)
    target_label = new[np.searchsorted(nodes, u[send])] if send.any() else np.zeros(0, np.int64)
    shuffled += write_partitioned(f"{plan.work}/messages-{r:05d}", {"node": v[send], "label": target_label},
                                  plan.partition(v[send]), plan.num_partitions, f"{p:05d}")
    return {"changed": int(len(changed_nodes)) if r else 0, "bytes_shuffled": shuffled}


def _root_pairs(job: tuple[_Plan, int, int]) -> dict:
    """(canonical, member) pairs of the final labels of partition p: a member with a verified edge to
    its canonical document is removed by that edge's Jaccard; the other pairs are sent to be checked."""
    plan, r, p = job
    labels = read_partition(f"{plan.work}/labels-{r:05d}", p, LABEL_SCHEMA)
    node, label = numpy_column(labels, "node"), numpy_column(labels, "label")
    members = node != label
    member, canonical = node[members], label[members]
    edges = read_partition(f"{plan.work}/edges", p, VERIFIED_EDGE_SCHEMA)  # every edge from a node of p
    edge_row = {pair: row for row, pair in enumerate(zip(numpy_column(edges, "u").tolist(),
                                                         numpy_column(edges, "v").tolist()))}
    rows = np.array([edge_row.get(pair, -1) for pair in zip(member.tolist(), canonical.tolist())], np.int64)
    known = rows >= 0
    removed = _removals(plan, member[known], edges, rows[known], f"verified-{p:05d}")
    unknown = np.stack([canonical[~known], member[~known]], axis=1)
    return {"members": int(members.sum()), "removed": int(known.sum()),
            "bytes_shuffled": removed + _send_pairs(plan, "check", unknown, f"{p:05d}")}


def _removals(plan: _Plan, member: np.ndarray, edges: pa.Table, rows: np.ndarray, name: str) -> int:
    """Write the removals of `member` by their verified edges (`rows` of `edges`), partitioned by shard."""
    if len(rows) == 0:
        return 0
    shard = plan.shard_of(member)
    member_ids, canonical_ids = string_column(edges, "u_id"), string_column(edges, "v_id")
    columns = {"index": member - plan.starts[shard], "id": [member_ids[i] for i in rows.tolist()],
               "duplicate_of": [canonical_ids[i] for i in rows.tolist()],
               "jaccard": numpy_column(edges, "jaccard")[rows]}
    return write_partitioned(f"{plan.work}/removals", columns, shard, len(plan.shards), name)


def _check(job: tuple[_Plan, int]) -> dict:
    """A member is removed when its Jaccard with its canonical document reaches the threshold."""
    plan, q = job
    pairs, similarity, ids = _pairs_with_similarity(plan, "check", q)
    keep = similarity >= plan.config.threshold if len(pairs) else np.zeros(0, bool)
    canonical, member = pairs[keep, 0], pairs[keep, 1]
    shard = plan.shard_of(member)
    columns = {"index": member - plan.starts[shard], "id": [ids[g] for g in member.tolist()],
               "duplicate_of": [ids[g] for g in canonical.tolist()], "jaccard": similarity[keep]}
    shuffled = write_partitioned(f"{plan.work}/removals", columns, shard, len(plan.shards), f"{q:05d}")
    return {"removed": int(keep.sum()), "rejected": int((~keep).sum()), "bytes_shuffled": shuffled}


def _write_shard(job: tuple[_Plan, int]) -> dict:
    plan, k = job
    name = shard_names(plan.shards)[k]
    removals = read_partition(f"{plan.work}/removals", k, REMOVAL_SCHEMA)
    index, jaccard = numpy_column(removals, "index"), numpy_column(removals, "jaccard")
    doc_ids, canonical = string_column(removals, "id"), string_column(removals, "duplicate_of")
    attributes = [{"index": int(index[r]), "id": doc_ids[r], "duplicate_of": canonical[r], "reason": "fuzzy_document",
                   "jaccard": round(float(jaccard[r]), 4)} for r in np.argsort(index, kind="stable").tolist()]
    return fuzzy_reuse.write_or_reuse(plan.reuse, plan.config, k, ShardWrite(
        plan.shards[k], plan.config.output_path, name, attributes, plan.config.on_bad_line,
        plan.config.output_format, plan.text_bytes[k]))


def _modules() -> list:
    """The code that computes a shard's band keys and written outputs (part of their addresses)."""
    return [sys.modules[__name__], minhash, output, shuffle, documents, attributes_module, fuzzy_reuse]


def forecast_shards(config: FuzzyDedupConfig, checksums: dict[str, dict[str, str]]) -> tuple[int, int] | str:
    """The dry run's forecast of the shards whose band keys this step expects to reuse (fuzzy_reuse.forecast)."""
    return fuzzy_reuse.forecast(config, checksums, _modules())


def fuzzy_dedup(config: FuzzyDedupConfig) -> dict[str, Any]:
    files = list_document_files(config.input_path)
    remove_stale_temporaries(config.output_path)
    shards = plan_document_shards(files, config.shard_bytes, config.text_column, config.id_column)
    names = shard_names(shards)
    work = f"{config.output_path.rstrip('/')}/.work/fuzzy"
    plan = _Plan(work, shards, choose_partitions(work, shards, config.partition_bytes), config,
                 reuse=fuzzy_reuse.plan_reuse(config, shards, names, _modules()))
    shard_keys = [f"{k:06d}" for k in range(len(shards))]
    part_keys = [f"{p:05d}" for p in range(plan.num_partitions)]
    cpus = config.num_cpus_per_shard

    ran: dict[str, list[dict]] = {}  # the results of every stage, component rounds together

    def stage_over(keys: list[str], stage: str, fn, *extra) -> list[dict]:
        jobs = [(plan, *extra, i) for i in range(len(keys))]
        results = run_stage(work, stage, fn, jobs, keys, f"fuzzy-dedup: {stage}", cpus)
        ran.setdefault(re.sub(r"-\d+$", "", stage), []).extend(results)
        return results

    def per_shard(stage: str, fn, *extra) -> list[dict]:
        return stage_over(shard_keys, stage, fn, *extra)

    def per_partition(stage: str, fn, *extra) -> list[dict]:
        return stage_over(part_keys, stage, fn, *extra)

    hashed = per_shard("minhash", _minhash)
    stats = combined_stats([ReadStats(**h["stats"]) for h in hashed], config.input_path, len(files))
    plan.starts = np.cumsum([0] + [h["documents"] for h in hashed]).astype(np.int64)
    plan.text_bytes = [text_bytes_if_clean(h["stats"], h.get("text_bytes")) for h in hashed]
    per_partition("lsh", _lsh)
    per_shard("candidate-shingles", _shingles, "candidates")
    verified = per_partition("verify", _verify)
    rounds = 0
    while True:
        propagated = per_partition(f"components-{rounds:05d}", _propagate, rounds)
        if rounds > 0 and sum(x["changed"] for x in propagated) == 0:
            break
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise RuntimeError(f"fuzzy-dedup: connected components did not converge in {MAX_ROUNDS} rounds")
    roots = per_partition("root-pairs", _root_pairs, rounds)
    per_shard("check-shingles", _shingles, "check")
    checked = per_partition("check", _check)
    written = per_shard("write", _write_shard)
    remove_tree(f"{config.output_path.rstrip('/')}/.work")
    return {
        **written_counts(stats, written, shards),
        "duplicate_documents": sum(x.get("removed", 0) for x in roots) + sum(c["removed"] for c in checked),
        "candidate_pairs": sum(v["candidate_pairs"] for v in verified),
        "verified_pairs": sum(v["verified_pairs"] for v in verified),
        "rejected_pairs": sum(v["candidate_pairs"] - v["verified_pairs"] for v in verified),
        "rejected_component_members": sum(c["rejected"] for c in checked),
        "documents_without_words": sum(h["without_words"] for h in hashed),
        "partitions": plan.num_partitions,
        "component_rounds": rounds + 1,
        "bytes_shuffled": int(sum(x.get("bytes_shuffled", 0) for stage in ran.values() for x in stage)),
        "tasks_resumed": sum(bool(x["resumed"]) for stage in ran.values() for x in stage),
        **fuzzy_reuse.reuse_counts(hashed, written),
        "nodes_per_stage": nodes_per_stage(ran),
    }


fuzzy_dedup.shard_forecast = forecast_shards  # type: ignore[attr-defined]  # read by the dry run (executor.tools.shard_forecast)
