"""The output side shared by the dedup steps: one kept-documents shard + one attribute shard per input.

Layout of a dedup step's output directory:

    docs/<shard>.jsonl.zst         kept documents, in input order (.parquet with output_format="parquet")
    attributes/<shard>.jsonl.zst   what was removed and why (see attributes.py)
    shards/<shard>.json            commit marker with the shard's counts, written last

A shard whose marker exists is not written again when the step is re-run (resume). A shard is a
whole input file or, for a big one, a piece of it (steps.documents.DocumentShard).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from steps.dedup.attributes import filter_documents
from steps.documents import (DocumentShard, OnBadLine, ReadStats, read_json, read_shard, write_documents,
                             write_json_atomically)

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

    @property
    def marker(self) -> str:
        return f"{self.output_path}/shards/{self.name}.json"


def write_dedup_shard(job: ShardWrite) -> dict[str, Any]:
    """Write attributes, then kept documents, then the commit marker; skip a committed shard."""
    committed = read_json(job.marker)
    if committed is not None:
        return {**committed, "resumed": True}
    write_documents(f"{job.output_path}/attributes/{job.name}.jsonl.zst", job.attributes)
    stats = ReadStats()
    out_bytes = 0

    def kept_docs():
        nonlocal out_bytes
        for doc in filter_documents(read_shard(job.shard, job.on_bad_line, stats), job.attributes):
            out_bytes += len(doc["text"].encode("utf-8"))
            yield doc

    docs_out = write_documents(f"{job.output_path}/docs/{job.name}.{job.output_format}", kept_docs())
    result = {"shard": job.name, "documents_out": docs_out, "text_bytes_out": out_bytes}
    write_json_atomically(job.marker, {"schema": 1, **result})
    return {**result, "resumed": False}


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
