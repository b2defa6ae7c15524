"""Deduplication steps: exact (xxh3-128 of documents and lines) and fuzzy (MinHash + LSH + verification).

Both read a directory (or glob) of JSONL documents and write `docs/` (kept documents),
`attributes/` (what was removed and why) and `shards/` (commit markers); see output.py.
"""

from steps.extras import DATA, require_extra

require_extra("data", "steps.dedup", DATA)

from steps.dedup.attributes import apply_attribute, filter_documents, filter_shard
from steps.dedup.exact import ExactDedupConfig, exact_dedup
from steps.dedup.fuzzy import FuzzyDedupConfig, fuzzy_dedup

__all__ = ["ExactDedupConfig", "exact_dedup", "FuzzyDedupConfig", "fuzzy_dedup",
           "apply_attribute", "filter_documents", "filter_shard"]
