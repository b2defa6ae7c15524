"""Incremental fuzzy dedup: each shard's MinHash band keys and written outputs reused across runs.

A grown corpus computes signatures for its new or changed shards only. Each shard's band keys
(`minhash/<shard>.arrow`: one (key, index) row per band of each document with words) are addressed
by the step's settings that shape them (bands, rows, n-gram, seed, how documents are read), the
code that computes them and the shard's bytes (steps/shard_reuse.py). A run under a new id copies
them from an earlier output of the step (under its prefix or a --cache-from prefix) when their bytes
match the recorded sha256, else computes them under the shard's claim (two runners growing the same
corpus compute a new shard once), and sends them into the LSH shuffle beside the new shards' keys,
so every stage after the minhash one sees the whole corpus and the kept set and the canonical
copies are a full run's. A shard's written outputs are reused the same way when its attributes
(what it loses, to what) are unchanged. Full and incremental runs write the same files, so their
outputs are byte-identical.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from steps import shard_reuse
from steps.dedup.output import ShardWrite, write_dedup_shard, write_dedup_shard_hashed
from steps.dedup.shuffle import arrow_column, numpy_column, read_table, write_table
from steps.documents import DocumentShard, list_document_files, plan_document_shards, read_json, shard_names

LIBRARIES = ["xxhash", "pyarrow", "numpy", "zstandard"]


@dataclass
class FuzzyReuse:
    """What the per-shard stages need to address and reuse their results (picklable)."""

    code: str
    shards: list[dict[str, Any]]
    """Per shard: its output name, file sha256 and piece (and path when skipping bad lines)."""
    sources: tuple[str, ...]
    output_path: str

    def address(self, stage: str, settings: dict[str, Any], k: int, **extra: Any) -> str:
        return shard_reuse.shard_address(f"fuzzy-dedup/{stage}", self.code, settings, {**self.shards[k], **extra})


def plan_reuse(config: Any, shards: list[DocumentShard], names: list[str], modules: list[ModuleType],
               digests: dict[str, str | None] | None = None) -> FuzzyReuse:
    """Addresses' ingredients: the input files' sha256 (one task per file, unless given), the code
    of `modules`, and the outputs of the step to reuse from (steps/shard_reuse.py's sources)."""
    files = sorted({s.path for s in shards})
    if digests is None:
        digests = dict(zip(files, shard_reuse.input_digests(config.output_path, files, "fuzzy-dedup: input digests")))
    described = [{"name": n, "sha256": digests[s.path], "start": s.start, "end": s.end,
                  **({"path": s.path} if config.on_bad_line == "skip" else {})} for s, n in zip(shards, names)]
    return FuzzyReuse(shard_reuse.code_digest(modules, LIBRARIES), described,
                      tuple(shard_reuse.sources(config.output_path)), config.output_path.rstrip("/"))


def forecast(config: Any, checksums: dict[str, dict[str, str]], modules: list[ModuleType]) -> tuple[int, int] | str:
    """A dry run's forecast (docs/steps.md): (shards whose stored band keys it expects to reuse,
    shards), from the upstream manifest's checksums and listings of the stored shard indexes
    (no shard is read); or why it cannot say."""
    files = list_document_files(config.input_path)
    digests = shard_reuse.sha256_of(checksums, files, config.output_path)
    if isinstance(digests, str):
        return f"not forecast: {digests}"
    shards = plan_document_shards(files, config.shard_bytes, config.text_column, config.id_column)
    reuse = plan_reuse(config, shards, shard_names(shards), modules, dict(zip(files, digests)))
    stored = shard_reuse.stored_addresses(config.output_path)
    settings = minhash_settings(config)
    return sum(reuse.address("minhash", settings, k) in stored for k in range(len(shards))), len(shards)


def minhash_settings(config: Any) -> dict[str, Any]:
    """The settings that shape a shard's band keys (not the threshold: it acts after them)."""
    return {name: getattr(config, name) for name in ("num_bands", "rows_per_band", "ngram", "seed", "on_bad_line",
                                                     "text_column", "id_column")}


def band_keys(reuse: FuzzyReuse, config: Any, k: int,
              compute: Callable[[], tuple[dict, np.ndarray, np.ndarray]]) -> tuple[dict, np.ndarray, np.ndarray]:
    """(result, keys, indexes) of shard k: copied from an earlier output when one holds them with
    matching bytes (the result then says `reused`), else `compute()`d and stored here under the
    shard's claim, so two runners that need the same new shard at once compute it once (the other
    copies it from the output the claim names: steps/shard_reuse.py)."""
    address = reuse.address("minhash", minhash_settings(config), k)
    rel = _keys_file(reuse, k)
    made: list[tuple[np.ndarray, np.ndarray]] = []

    def make() -> dict[str, Any]:
        result, keys, indexes = compute()
        written = hashlib.sha256()
        write_table(f"{reuse.output_path}/{rel}", pa.table({"key": arrow_column(keys),
                                                            "index": arrow_column(indexes)}), written)
        shard_reuse.record(reuse.output_path, address, [rel], result, {rel: written.hexdigest()})
        made.append((keys, indexes))
        return result

    found = shard_reuse.reuse(reuse.output_path, address, list(reuse.sources))  # no claim for a stored result
    result, made_here = (found, False) if found is not None else shard_reuse.reuse_or_make(
        reuse.output_path, address, list(reuse.sources), make)
    if made_here:
        return result, *made[0]
    table = read_table(f"{reuse.output_path}/{rel}")
    return {**result, "reused": True}, numpy_column(table, "key"), numpy_column(table, "index")


def _keys_file(reuse: FuzzyReuse, k: int) -> str:
    return f"minhash/{reuse.shards[k]['name']}.arrow"


def write_or_reuse(reuse: FuzzyReuse | None, config: Any, k: int, write: ShardWrite) -> dict[str, Any]:
    """`write_dedup_shard`, or its outputs copied from an earlier run that wrote this shard with the
    same attributes and settings (the same bytes); a shard two runners both need is written once,
    under the shard's claim on its address (steps/shard_reuse.py), and copied by the other."""
    if reuse is None:
        return write_dedup_shard(write)
    attributes = hashlib.sha256(json.dumps(write.attributes, sort_keys=True).encode("utf-8")).hexdigest()
    settings = {**minhash_settings(config), "threshold": config.threshold, "output_format": config.output_format}
    address = reuse.address("write", settings, k, attributes_sha256=attributes, text_bytes_in=write.text_bytes_in)
    files = [f"attributes/{write.name}.jsonl.zst", f"docs/{write.name}.{config.output_format}",
             f"shards/{write.name}.json"]  # the commit marker last

    def make() -> dict[str, Any]:
        result, digests = write_dedup_shard_hashed(write)
        shard_reuse.record_if_missing(reuse.output_path, address, files,
                                      {key: v for key, v in result.items() if key != "resumed"}, digests)
        return result

    if read_json(write.marker) is not None:  # resumed: committed by this output's killed run
        return make()
    result, made_here = shard_reuse.reuse_or_make(reuse.output_path, address, list(reuse.sources), make)
    return result if made_here else {**result, "resumed": False, "reused": True}


def reuse_counts(hashed: list[dict], written: list[dict]) -> dict[str, int]:
    """What the result says about reuse: shards whose signatures were computed or reused, and
    shards whose outputs were written (not copied)."""
    fresh: Callable[[dict], bool] = lambda r: not r["resumed"] and not r.get("reused")  # noqa: E731
    return {"shards_processed": sum(map(fresh, hashed)), "shards_reused": sum(bool(h.get("reused")) for h in hashed),
            "shards_rewritten": sum(map(fresh, written))}
