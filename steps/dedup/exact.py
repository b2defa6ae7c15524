"""Exact deduplication of documents (and optionally of repeated lines) with xxh3-128, as a shuffle.

1. hash (one task per input shard): the xxh3-128 of every document's text, written as
   (hash, shard, index, id) records into Arrow files partitioned by hash under
   `<output>/.work/exact/hash/<partition>/`.
2. reduce (one task per partition): rows sorted by (hash, shard, index); all but the first of each
   hash are removed, the first occurrence in the global order (input files sorted by path, then
   line order) being canonical; removals are written partitioned by shard.
3. paragraphs (optional, the same two stages over lines of surviving documents).
4. write (one task per shard): sparse attributes and the kept documents (see output.py); when the
   hash stage found every line of a JSONL shard a valid document, untouched documents are copied
   byte for byte rather than parsed again.
Incremental: each shard's hash records (`hashes/<shard>.arrow`) and written outputs are addressed
by the step's settings, this code, the shard's bytes and, for the written outputs, the shard's
attributes (steps/shard_reuse.py). A run under a new id reuses them from earlier outputs of the step:
a grown corpus hashes only its new or changed shards; the reduce always sees every shard's records,
so the kept set and the canonical copies are a full run's, and a shard whose removals changed is
written again (`shards_rewritten`). Reused shards' stored records reach the shuffle a group at a
time (about `partition_bytes` of records each: one file per partition and group, not per shard).
The paragraph stage, when on, reads every shard.
The driver holds one small dict per shard and per partition, never per document, and a worker
holds one shard's or one partition's records: `partition_bytes` (execution-only) sizes the
partitions. The kept set does not depend on the shard, partition or worker counts. Each task
commits a marker, so a killed run resumes where it stopped; `.work/` is deleted at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from executor import execution_only, map_shards
from steps import documents, shard_reuse
from steps.dedup import attributes as attributes_module
from steps.dedup import output, shuffle
from steps.dedup.output import (ShardWrite, check_output_format, text_bytes_if_clean, write_dedup_shard,
                               write_dedup_shard_hashed, written_counts)
from steps.dedup.shuffle import (arrow_column, choose_partitions, nodes_per_stage, numpy_column, read_partition,
                                 read_table, remove_tree, run_stage, string_column, take_strings, write_partitioned,
                                 write_table)
from steps.documents import (DocumentShard, OnBadLine, ReadStats, combined_stats, list_document_files,
                             plan_document_shards, read_json, read_shard, read_shard_blocks,
                             remove_stale_temporaries, shard_names)


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
    text_column: str = "text"
    """Parquet inputs: the column holding the document text."""
    id_column: str = "id"
    """Parquet inputs: the column holding the document id."""
    output_format: str = "jsonl.zst"
    """Kept documents as "jsonl.zst" or "parquet"."""
    shard_bytes: int = execution_only(256 << 20)
    """Input files larger than this are read as several shards (uncompressed JSONL, Parquet)."""
    partition_bytes: int = execution_only(16 << 20)
    """Input bytes per shuffle partition: bounds the memory of a reduce task."""
    num_cpus_per_shard: float = execution_only(1)

    def __post_init__(self) -> None:
        check_output_format("ExactDedupConfig", self.output_format)


HASH_SCHEMA = pa.schema([("h1", pa.uint64()), ("h2", pa.uint64()), ("shard", pa.int32()), ("index", pa.int64()),
                         ("line", pa.int32()), ("id", pa.string())])
DOCS_ZSTD_LEVEL = 2
"""The zstd level of the kept documents: compression is the largest part of the step's CPU, and level
2 takes about a third less of it than level 3 for files about 4 % larger (docs/steps.md)."""
REMOVAL_SCHEMA = pa.schema([("index", pa.int64()), ("line", pa.int32()), ("id", pa.string()),
                            ("duplicate_of", pa.string())])


@dataclass
class _Reuse:
    """What the per-shard stages need to address and reuse their results (steps/shard_reuse.py)."""

    code: str
    shards: list[dict[str, Any]]
    """Per shard: its output name, file sha256 and piece (and path when skipping bad lines)."""
    sources: tuple[str, ...]

    def address(self, stage: str, settings: dict[str, Any], k: int, **extra: Any) -> str:
        return shard_reuse.shard_address(f"exact-dedup/{stage}", self.code, settings, {**self.shards[k], **extra})


@dataclass
class _Plan:
    work: str
    shards: list[DocumentShard]
    num_partitions: int
    config: ExactDedupConfig
    names: list[str] = dataclasses.field(default_factory=list)
    reuse: _Reuse | None = None


def _digests_to_columns(digests: bytearray) -> tuple[np.ndarray, np.ndarray]:
    words = np.frombuffer(bytes(digests), dtype="<u8").reshape(-1, 2)
    return words[:, 0].copy(), words[:, 1].copy()


def _write_records(plan: _Plan, stage: str, k: int, digests: bytearray | tuple[np.ndarray, np.ndarray],
                   indexes: list[int] | np.ndarray, lines: list[int] | np.ndarray, ids: list[str] | pa.Array) -> int:
    h1, h2 = _digests_to_columns(digests) if isinstance(digests, bytearray) else digests
    columns = {"h1": h1, "h2": h2, "shard": np.full(len(h1), k, np.int32), "index": np.asarray(indexes, np.int64),
               "line": np.asarray(lines, np.int32), "id": ids}
    return write_partitioned(f"{plan.work}/{stage}", columns, (h1 % np.uint64(plan.num_partitions)).astype(np.int64),
                             plan.num_partitions, f"{k:06d}")


def _hash_settings(config: ExactDedupConfig) -> dict[str, Any]:
    return {"on_bad_line": config.on_bad_line, "text_column": config.text_column, "id_column": config.id_column}


def _hash_documents(job: tuple[_Plan, int]) -> dict:
    plan, k = job
    out = plan.config.output_path.rstrip("/")
    rel = f"hashes/{plan.names[k]}.arrow"
    address = plan.reuse.address("hash", _hash_settings(plan.config), k) if plan.reuse else None
    if address is None:
        result = _hash_shard(plan, k)
        return {key: v for key, v in result.items() if key not in ("digests", "indexes", "ids")}

    def make() -> dict:
        made = _hash_shard(plan, k)
        h1, h2 = made.pop("digests")
        written = hashlib.sha256()
        write_table(f"{out}/{rel}", pa.table({"h1": arrow_column(h1), "h2": arrow_column(h2),
                                              "index": arrow_column(made.pop("indexes")), "id": made.pop("ids")}),
                    written)
        shard_reuse.record(out, address, [rel], {key: v for key, v in made.items() if key != "bytes_shuffled"},
                           {rel: written.hexdigest()})
        return made

    result, made_here = shard_reuse.reuse_or_make(out, address, list(plan.reuse.sources), make)
    if made_here:
        return result
    # Its stored records reach the shuffle with the other reused shards' (_reused_records).
    return {**result, "bytes_shuffled": 0, "reused": True}


def _reused_groups(plan: _Plan, hashed: list[dict]) -> list[list[int]]:
    """The reused shards, in order, in groups holding at most about a partition's worth of records
    each (a group of one when a shard alone holds more): one task writes a group's records to the
    shuffle, a file per partition, where shard by shard would write (reused shards x partitions)
    small files again on every run."""
    budget = max(1, plan.config.partition_bytes // _RECORD_BYTES)
    groups: list[list[int]] = []
    rows = 0
    for k, h in enumerate(hashed):
        if not h.get("reused"):
            continue
        count = h["stats"]["documents"]
        if not groups or rows + count > budget:
            groups.append([])
            rows = 0
        groups[-1].append(k)
        rows += count
    return groups


_RECORD_BYTES = 64
"""About the bytes of one hash record in memory (two hashes, shard, index, line, a short id)."""


def _reused_records(job: tuple[_Plan, list[int]]) -> dict:
    """Write the stored hash records of a group of reused shards to the shuffle."""
    plan, group = job
    out = plan.config.output_path.rstrip("/")
    tables = [read_table(f"{out}/hashes/{plan.names[k]}.arrow") for k in group]
    rows = sum(t.num_rows for t in tables)
    if not rows:
        return {"bytes_shuffled": 0}
    columns = {"h1": np.concatenate([numpy_column(t, "h1") for t in tables]),
               "h2": np.concatenate([numpy_column(t, "h2") for t in tables]),
               "shard": np.concatenate([np.full(t.num_rows, k, np.int32) for t, k in zip(tables, group)]),
               "index": np.concatenate([numpy_column(t, "index") for t in tables]),
               "line": np.zeros(rows, np.int32),
               "id": pa.chunked_array([c for t in tables for c in t.column("id").chunks], pa.string())}
    partition = (columns["h1"] % np.uint64(plan.num_partitions)).astype(np.int64)
    return {"bytes_shuffled": write_partitioned(f"{plan.work}/hash", columns, partition, plan.num_partitions,
                                                f"reused-{group[0]:06d}")}


def _strings(values: list[str]) -> pa.Array:
    return arrow_column(values) if values else pa.array([], pa.string())


_TEXT, _ID = operator.itemgetter("text"), operator.itemgetter("id")


def _hash_shard(plan: _Plan, k: int) -> dict:
    """Hash shard k's documents and write their records to the shuffle; also returns the records.
    A block of documents at a time: the texts' encoding and hashing run as C-level maps."""
    stats = ReadStats()
    digests, ids, text_bytes = bytearray(), [], 0
    digest = xxhash.xxh3_128_digest
    for block in read_shard_blocks(plan.shards[k], plan.config.on_bad_line, stats):
        texts = list(map(str.encode, map(_TEXT, block)))  # UTF-8
        digests += b"".join(map(digest, texts))
        text_bytes += sum(map(len, texts))
        ids.extend(map(_ID, block))
    indexes, columns, id_array = np.arange(len(ids), dtype=np.int64), _digests_to_columns(digests), _strings(ids)
    shuffled = (_write_records(plan, "hash", k, columns, indexes, np.zeros(len(ids), np.int32), id_array)
                if plan.config.documents else 0)
    return {"stats": dataclasses.asdict(stats), "bytes_shuffled": shuffled, "text_bytes": text_bytes,
            "digests": columns, "indexes": indexes, "ids": id_array}


def _reduce(job: tuple[_Plan, str, int]) -> dict:
    """Rows of one partition: all but the first (shard, index, line) of each hash are removals."""
    plan, stage, p = job
    table = read_partition(f"{plan.work}/{stage}", p, HASH_SCHEMA)
    if table.num_rows == 0:
        return {"removed": 0, "bytes_shuffled": 0}
    h1, h2, shard, index, line = (numpy_column(table, name) for name in ("h1", "h2", "shard", "index", "line"))
    order = np.lexsort((line, index, shard, h2, h1))
    h1, h2 = h1[order], h2[order]
    first = np.r_[True, (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])]
    canonical_row = order[np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))]
    removed_rows, canonical_rows = order[~first], canonical_row[~first]
    ids = table.column("id")  # Arrow strings: only the removed rows' ids and canonicals are taken
    columns = {"index": index[removed_rows], "line": line[removed_rows], "id": take_strings(ids, removed_rows),
               "duplicate_of": take_strings(ids, canonical_rows)}
    shuffled = write_partitioned(f"{plan.work}/{stage}-removals", columns, shard[removed_rows].astype(np.int64),
                                 len(plan.shards), f"{p:05d}")
    return {"removed": int(len(removed_rows)), "bytes_shuffled": shuffled}


def _removals(plan: _Plan, stage: str, k: int) -> pa.Table:
    return read_partition(f"{plan.work}/{stage}-removals", k, REMOVAL_SCHEMA)


def _removal_columns(removals: pa.Table, names: tuple[str, ...]) -> list[list]:
    return [string_column(removals, n) if removals.schema.field(n).type == pa.string()
            else numpy_column(removals, n).tolist() for n in names]


def _hash_paragraphs(job: tuple[_Plan, int]) -> dict:
    """Line records of the documents of shard k that survive document dedup."""
    plan, k = job
    removed = set(numpy_column(_removals(plan, "hash", k), "index").tolist())
    digests, indexes, lines, ids = bytearray(), [], [], []
    digest, min_chars = xxhash.xxh3_128_digest, plan.config.min_paragraph_chars
    for index, doc in enumerate(read_shard(plan.shards[k], plan.config.on_bad_line)):
        if index in removed:
            continue
        for line_index, line in enumerate(doc["text"].split("\n")):
            if len(line.strip()) >= min_chars:
                digests += digest(line.encode("utf-8"))
                indexes.append(index)
                lines.append(line_index)
                ids.append(doc["id"])
    return {"bytes_shuffled": _write_records(plan, "paragraphs", k, digests, indexes, lines, ids)}


def _line_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each line, the end including the newline that follows it."""
    spans, start = [], 0
    for line in text.split("\n"):
        end = start + len(line)
        spans.append((start, min(end + 1, len(text))))
        start = end + 1
    return spans


def _write_shard(job: tuple[_Plan, int, str, int | None]) -> dict:
    plan, k, name, text_bytes_in = job
    config = plan.config
    attributes: dict[int, dict[str, Any]] = {}
    if config.documents:
        removals = _removals(plan, "hash", k)
        for index, doc_id, canonical in zip(*_removal_columns(removals, ("index", "id", "duplicate_of"))):
            attributes[index] = {"index": index, "id": doc_id, "duplicate_of": canonical, "reason": "exact_document"}
    removed_paragraphs = 0
    if config.paragraphs:
        lines_by_doc: dict[int, list[tuple[int, str]]] = {}
        removals = _removals(plan, "paragraphs", k)
        doc_ids = {}
        for index, line, doc_id, canonical in zip(*_removal_columns(removals, ("index", "line", "id",
                                                                               "duplicate_of"))):
            lines_by_doc.setdefault(index, []).append((line, canonical))
            doc_ids[index] = doc_id
        if lines_by_doc:
            for index, doc in enumerate(read_shard(plan.shards[k], config.on_bad_line)):
                if index in lines_by_doc:
                    spans = _line_spans(doc["text"])
                    removed = [[spans[line][0], spans[line][1], c] for line, c in sorted(lines_by_doc[index])]
                    removed_paragraphs += len(removed)
                    attributes[index] = {"index": index, "id": doc_ids[index], "duplicate_spans": removed,
                                         "reason": "exact_paragraph"}
    ordered = [attributes[i] for i in sorted(attributes)]
    result = _write_or_reuse(plan, k, ShardWrite(plan.shards[k], config.output_path, name, ordered,
                                                 config.on_bad_line, config.output_format, text_bytes_in,
                                                 DOCS_ZSTD_LEVEL))
    return {**result, "duplicate_documents": sum("duplicate_of" in a for a in ordered),
            "duplicate_paragraphs": removed_paragraphs}


def _write_or_reuse(plan: _Plan, k: int, write: ShardWrite) -> dict:
    """write_dedup_shard, or its outputs copied from an earlier run that wrote this shard with the
    same attributes (the same bytes); a shard two runners both need is written once, under a claim
    on its address (steps/shard_reuse.py), and copied by the other."""
    if plan.reuse is None:
        return write_dedup_shard(write)
    config, out = plan.config, plan.config.output_path.rstrip("/")
    attributes = hashlib.sha256(json.dumps(write.attributes, sort_keys=True).encode("utf-8")).hexdigest()
    address = plan.reuse.address("write", {**_hash_settings(config), "output_format": config.output_format}, k,
                                 attributes_sha256=attributes, text_bytes_in=write.text_bytes_in)
    files = [f"attributes/{write.name}.jsonl.zst", f"docs/{write.name}.{config.output_format}",
             f"shards/{write.name}.json"]  # the commit marker last

    def make() -> dict:
        result, digests = write_dedup_shard_hashed(write)
        shard_reuse.record_if_missing(out, address, files, {key: v for key, v in result.items() if key != "resumed"},
                                      digests)
        return result

    if read_json(write.marker) is not None:  # resumed: committed by this output's killed run
        return make()
    result, made_here = shard_reuse.reuse_or_make(out, address, list(plan.reuse.sources), make)
    return result if made_here else {**result, "resumed": False, "reused": True}


def _plan_reuse(config: ExactDedupConfig, shards: list[DocumentShard], names: list[str],
                digests: dict[str, str] | None = None) -> _Reuse:
    files = sorted({s.path for s in shards})
    if digests is None:
        digests = dict(zip(files, shard_reuse.input_digests(config.output_path, files, "exact-dedup: input digests")))
    code = shard_reuse.code_digest([sys.modules[__name__], output, shuffle, documents, attributes_module],
                                   ["xxhash", "pyarrow", "numpy", "zstandard"])
    described = [{"name": n, "sha256": digests[s.path], "start": s.start, "end": s.end,
                  **({"path": s.path} if config.on_bad_line == "skip" else {})} for s, n in zip(shards, names)]
    return _Reuse(code, described, tuple(shard_reuse.sources(config.output_path)))


def forecast_shards(config: ExactDedupConfig, checksums: dict[str, dict[str, str]]) -> tuple[int, int] | str | None:
    """A dry run's forecast (docs/steps.md): (shards whose stored hash records it expects to reuse,
    shards), from the upstream manifest's checksums and listings of the earlier outputs' shard
    indexes; or why it cannot say; None when nothing is reused (paragraphs only)."""
    if not config.documents:
        return None
    files = list_document_files(config.input_path)
    digests = shard_reuse.sha256_of(checksums, files, config.output_path)
    if isinstance(digests, str):
        return f"not forecast: {digests}"
    shards = plan_document_shards(files, config.shard_bytes, config.text_column, config.id_column)
    reuse = _plan_reuse(config, shards, shard_names(shards), dict(zip(files, digests)))
    stored = shard_reuse.stored_addresses(config.output_path)
    return sum(reuse.address("hash", _hash_settings(config), k) in stored for k in range(len(shards))), len(shards)


def exact_dedup(config: ExactDedupConfig) -> dict[str, Any]:
    files = list_document_files(config.input_path)
    remove_stale_temporaries(config.output_path)
    shards = plan_document_shards(files, config.shard_bytes, config.text_column, config.id_column)
    names = shard_names(shards)
    work = f"{config.output_path.rstrip('/')}/.work/exact"
    plan = _Plan(work, shards, choose_partitions(work, shards, config.partition_bytes), config, names,
                 _plan_reuse(config, shards, names) if config.documents else None)
    keys = [f"{k:06d}" for k in range(len(shards))]
    parts = list(range(plan.num_partitions))
    part_keys = [f"{p:05d}" for p in parts]
    cpus = config.num_cpus_per_shard

    stages: dict[str, list[dict]] = {}
    hashed = stages["hash"] = run_stage(work, "hash", _hash_documents, [(plan, k) for k in range(len(shards))],
                                        keys, "exact-dedup: hash", cpus)
    stats = combined_stats([ReadStats(**h["stats"]) for h in hashed], config.input_path, len(files))
    groups = _reused_groups(plan, hashed)
    if groups:
        stages["reused-records"] = run_stage(work, "reused-records", _reused_records,
                                             [(plan, group) for group in groups],
                                             [f"{group[0]:06d}-{group[-1]:06d}" for group in groups],
                                             "exact-dedup: reused records", cpus)
    if config.documents:
        stages["reduce"] = run_stage(work, "reduce", _reduce, [(plan, "hash", p) for p in parts], part_keys,
                                     "exact-dedup: reduce", cpus)
    if config.paragraphs:
        stages["paragraph-hash"] = run_stage(work, "paragraph-hash", _hash_paragraphs,
                                             [(plan, k) for k in range(len(shards))], keys,
                                             "exact-dedup: hash lines", cpus)
        stages["paragraph-reduce"] = run_stage(work, "paragraph-reduce", _reduce,
                                               [(plan, "paragraphs", p) for p in parts], part_keys,
                                               "exact-dedup: reduce lines", cpus)
    written = stages["write"] = run_stage(
        work, "write", _write_shard,
        [(plan, k, names[k], text_bytes_if_clean(hashed[k]["stats"], hashed[k].get("text_bytes")))
         for k in range(len(shards))], keys,
        "exact-dedup: write", cpus)
    shuffled = sum(x.get("bytes_shuffled", 0) for stage in stages.values() for x in stage)
    remove_tree(f"{config.output_path.rstrip('/')}/.work")
    return {**written_counts(stats, written, shards),
            "duplicate_documents": sum(w["duplicate_documents"] for w in written),
            "duplicate_paragraphs": sum(w["duplicate_paragraphs"] for w in written),
            "partitions": plan.num_partitions, "bytes_shuffled": int(shuffled),
            "tasks_resumed": sum(bool(x["resumed"]) for stage in stages.values() for x in stage),
            "shards_reused": sum(bool(h.get("reused")) for h in hashed),
            "shards_processed": sum(not h["resumed"] and not h.get("reused") for h in hashed),
            "shards_rewritten": sum(not w["resumed"] and not w.get("reused") for w in written),
            "nodes_per_stage": nodes_per_stage(stages)}


exact_dedup.shard_forecast = forecast_shards  # type: ignore[attr-defined]  # read by the dry run (executor.tools.shard_forecast)
