"""Dedup attributes: sparse per-shard records of what dedup removes and why, and the filter applying them.

For each input shard a dedup step writes `attributes/<shard>.jsonl.zst` with one line per affected
document (documents left untouched have no line):

    {"index": 12, "id": "doc-12", "duplicate_of": "doc-3", "reason": "exact_document"}
    {"index": 40, "id": "doc-40", "duplicate_of": "doc-7", "reason": "fuzzy_document", "jaccard": 0.91}
    {"index": 41, "id": "doc-41", "duplicate_spans": [[0, 57, "doc-2"]], "reason": "exact_paragraph"}

`index` is the document's position among the shard's valid documents (ids need not be unique);
spans are [start, end) character offsets into the text, each covering a line and its newline.
`filter_shard` applies a shard's attributes to its documents; the step uses it to write `docs/`,
and anyone may re-apply the attributes to the input later.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from steps.documents import OnBadLine, ReadStats, read_documents

ATTRIBUTES_SCHEMA = 1


def apply_attribute(doc: dict[str, Any], attribute: dict[str, Any] | None) -> dict[str, Any] | None:
    """The document after its attribute is applied, or None when it is removed."""
    if attribute is None:
        return doc
    if attribute.get("duplicate_of") is not None:
        return None
    spans = attribute.get("duplicate_spans")
    if spans:
        text, pieces, cursor = doc["text"], [], 0
        for start, end, _canonical in sorted(spans):
            pieces.append(text[cursor:start])
            cursor = max(cursor, end)
        pieces.append(text[cursor:])
        new_text = "".join(pieces)
        if not new_text.strip():
            return None
        return {**doc, "text": new_text}
    return doc


def filter_documents(docs: Iterable[dict[str, Any]], attributes: Iterable[dict[str, Any]],
                     ) -> Iterator[dict[str, Any]]:
    """Apply attributes (sorted by `index`) to documents in shard order; yield what is kept."""
    by_index = {a["index"]: a for a in attributes}
    for index, doc in enumerate(docs):
        kept = apply_attribute(doc, by_index.get(index))
        if kept is not None:
            yield kept


def filter_shard(input_path: str, attributes: Iterable[dict[str, Any]], on_bad_line: OnBadLine = "error",
                 stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """The kept documents of one input shard, given that shard's attributes."""
    return filter_documents(read_documents(input_path, on_bad_line, stats), attributes)
