"""The dedup steps' kept-documents writer (steps/dedup/output.py): a whole JSONL file's kept lines are
copied a block at a time, and the file is the one the line-by-line copy writes, whatever the blocks
cut through (blank and whitespace lines, carriage returns, a last line without its newline, removals
at a block's first and last line), with the sha256 it reports hashed while writing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import zstandard

from steps.dedup import output
from steps.dedup.output import ShardWrite
from steps.documents import DocumentShard


def _lines(n: int) -> list[bytes]:
    texts = ["café naïve", "日本語のテキスト\nsecond line of it", "plain ascii", "€20 → ©", "x" * 90]
    return [json.dumps({"id": f"d{i}", "text": f"{texts[i % len(texts)]} {i}"}, ensure_ascii=i % 2 == 0).encode()
            for i in range(n)]


def _raw(lines: list[bytes], style: str) -> bytes:
    if style == "plain":
        return b"\n".join(lines) + b"\n"
    if style == "no final newline":
        return b"\n".join(lines)
    if style == "crlf":
        return b"\r\n".join(lines) + b"\r\n"
    if style == "blank lines":  # empty and whitespace-only lines, and a line led by a space
        return b"\n".join(line + (b"\n \t\n" if i % 7 == 0 else b"\n\n" if i % 5 == 0 else b"") for i, line
                          in enumerate(lines[:-1])) + b"\n  " + lines[-1] + b"\n"
    raise ValueError(style)


def _attributes(n: int) -> list[dict]:
    removed = [0, 1, 9, 10, 11, 26, n - 2, n - 1]
    attributes = {i: {"index": i, "id": f"d{i}", "duplicate_of": "d3", "reason": "exact_document"} for i in removed}
    attributes[13] = {"index": 13, "id": "d13", "duplicate_spans": [[0, 9, "d1"]], "reason": "exact_paragraph"}
    return [attributes[i] for i in sorted(attributes)]


@pytest.mark.parametrize("style", ["plain", "no final newline", "crlf", "blank lines"])
@pytest.mark.parametrize("block_bytes", [1, 37, 256, 1 << 20])
def test_kept_lines_copied_by_blocks_write_the_line_by_line_file(tmp_path, monkeypatch, style, block_bytes):
    n = 40
    source = tmp_path / "part.jsonl.zst"
    source.write_bytes(zstandard.ZstdCompressor().compress(_raw(_lines(n), style)))
    text_bytes = sum(len(json.loads(line)["text"].encode()) for line in _lines(n))
    write = ShardWrite(DocumentShard(str(source)), str(tmp_path), "part", _attributes(n), text_bytes_in=text_bytes)
    by_lines = output._copy_kept_lines(write, str(tmp_path / "by-lines.jsonl.zst"))
    monkeypatch.setattr(output, "_BLOCK_BYTES", block_bytes)
    digest = hashlib.sha256()
    by_blocks = output._copy_kept_blocks(write, str(tmp_path / "by-blocks.jsonl.zst"), digest)
    written = (tmp_path / "by-blocks.jsonl.zst").read_bytes()
    assert by_blocks == by_lines == (n - 8, by_lines[1])
    assert zstandard.ZstdDecompressor().decompress(written, max_output_size=1 << 20) == \
        zstandard.ZstdDecompressor().decompress((tmp_path / "by-lines.jsonl.zst").read_bytes(), max_output_size=1 << 20)
    assert written == (tmp_path / "by-lines.jsonl.zst").read_bytes()
    assert digest.hexdigest() == hashlib.sha256(written).hexdigest()


def test_a_written_shard_reports_the_sha256_of_each_file_it_wrote(tmp_path):
    source = tmp_path / "in" / "part.jsonl.zst"
    source.parent.mkdir()
    source.write_bytes(zstandard.ZstdCompressor().compress(_raw(_lines(12), "plain")))
    write = ShardWrite(DocumentShard(str(source)), str(tmp_path / "out"), "part", _attributes(12)[:3],
                       text_bytes_in=10**6)
    result, digests = output.write_dedup_shard_hashed(write)
    assert set(digests) == {"attributes/part.jsonl.zst", "docs/part.jsonl.zst"}
    for rel, sha in digests.items():
        assert hashlib.sha256(Path(tmp_path / "out" / rel).read_bytes()).hexdigest() == sha
    again, digests = output.write_dedup_shard_hashed(write)  # committed: nothing written, nothing hashed
    assert (again["resumed"], again["documents_out"], digests) == (True, result["documents_out"], {})
