"""The shared reader of whole JSONL files (steps/documents.py) reads a block of decompressed bytes at a
time and splits it once: whatever the blocks cut through (blank and whitespace lines, carriage
returns, a last line without its newline, bad lines), it gives what reading the file line by line
gives: the same documents, line numbers in messages, byte and skip counts, record ranges and counts.
The reference below is that line-by-line reading, with the per-line parser the reader falls back to."""

from __future__ import annotations

import contextvars
import dataclasses
import gzip
import hashlib
import io
import json
import threading
from pathlib import Path

import pytest
import zstandard

from steps import documents
from steps.documents import BadInputError, ReadStats


def _lines(n: int) -> list[bytes]:
    texts = ["café naïve", "日本語のテキスト\nsecond line", "plain ascii", "€20 → ©", "x" * 90]
    return [json.dumps({"id": f"d{i}", "text": f"{texts[i % len(texts)]} {i}"}, ensure_ascii=i % 2 == 0).encode()
            for i in range(n)]


def _raw(style: str, n: int = 40) -> bytes:
    lines = _lines(n)
    if style == "plain":
        return b"\n".join(lines) + b"\n"
    if style == "no final newline":
        return b"\n".join(lines)
    if style == "crlf":
        return b"\r\n".join(lines) + b"\r\n"
    if style == "blank lines":  # empty and whitespace-only lines, a line led by spaces, a blank last line
        return b"\n".join(line + (b"\n \t\n" if i % 7 == 0 else b"\n\n" if i % 5 == 0 else b"") for i, line
                          in enumerate(lines[:-1])) + b"\n  " + lines[-1] + b"\n \r\n\x0c"
    if style == "bad lines":  # not JSON, no text, an integer id, an array, then a last line without newline
        lines[3], lines[11], lines[12], lines[30] = b"{not json", b'{"id": "x"}', b'{"id": 7, "text": "t"}', b"[1]"
        return b"\n".join(lines)
    raise ValueError(style)


def _write(tmp_path: Path, raw: bytes, suffix: str) -> str:
    path = tmp_path / f"part{suffix}"
    compress = {".jsonl": bytes, ".jsonl.gz": gzip.compress, ".jsonl.zst": zstandard.ZstdCompressor().compress}
    path.write_bytes(compress[suffix](raw))
    return str(path)


def _reference(raw: bytes, path: str, records: tuple[int, int] | None = None):
    """Line by line, as the reader worked before blocks: (number, line) of the non-blank lines in
    `records`, the documents on them and the stats of reading them with on_bad_line="skip"."""
    numbered = [(n, line) for n, line in enumerate(io.BytesIO(raw), start=1) if line.strip()]
    first, last = records or (0, None)
    numbered = numbered[first:last]
    stats, docs = ReadStats(), []
    for n, line in numbered:
        doc = documents._parse_line(line, f"{path}:{n}", "skip", stats)
        if doc is not None:
            docs.append(doc)
    return numbered, docs, stats


@pytest.mark.parametrize("style", ["plain", "no final newline", "crlf", "blank lines", "bad lines"])
@pytest.mark.parametrize("block_bytes", [1, 37, 256, 1 << 20])
@pytest.mark.parametrize("suffix", [".jsonl.zst", ".jsonl.gz", ".jsonl"])
def test_blocks_read_what_the_line_by_line_reader_reads(tmp_path, monkeypatch, style, block_bytes, suffix):
    raw = _raw(style)
    path = _write(tmp_path, raw, suffix)
    monkeypatch.setattr(documents, "BLOCK_BYTES", block_bytes)
    numbered, expected_docs, expected_stats = _reference(raw, path)
    stats = ReadStats()
    assert list(documents.read_documents(path, "skip", stats)) == expected_docs
    assert dataclasses.asdict(stats) == dataclasses.asdict(expected_stats)
    assert list(documents._file_lines(path)) == numbered
    assert documents.count_records(path) == len(numbered)
    assert b"".join(documents.decompressed_blocks(path)) == raw


@pytest.mark.parametrize("style", ["plain", "no final newline", "blank lines", "bad lines"])
@pytest.mark.parametrize("records", [(0, 1), (3, 17), (5, 40), (39, 45), (0, 100)])
@pytest.mark.parametrize("block_lines", [3, 1024])
@pytest.mark.parametrize("block_bytes", [97, 1 << 20])
def test_record_ranges_and_document_lists_cut_where_the_lines_do(tmp_path, monkeypatch, style, records,
                                                                   block_lines, block_bytes):
    raw = _raw(style)
    path = _write(tmp_path, raw, ".jsonl.zst")
    monkeypatch.setattr(documents, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(documents, "BLOCK_LINES", block_lines)
    _, expected_docs, expected_stats = _reference(raw, path, records)
    stats = ReadStats()
    blocks = list(documents.read_document_blocks(path, "skip", stats, records))
    assert [doc for block in blocks for doc in block] == expected_docs
    assert all(len(block) <= block_lines for block in blocks)
    assert dataclasses.asdict(stats) == dataclasses.asdict(expected_stats)


@pytest.mark.parametrize("block_bytes", [1, 256, 1 << 20])
def test_a_bad_line_is_named_by_its_line_number_in_the_file(tmp_path, monkeypatch, block_bytes):
    raw = _raw("blank lines").replace(b'"id": "d20"', b'"id": "d20"', 1)
    lines = raw.split(b"\n")
    bad = next(i for i, line in enumerate(lines) if b'"d20"' in line)
    lines[bad] = b'{"id": "d20", "text": 5}'
    path = _write(tmp_path, b"\n".join(lines), ".jsonl.zst")
    monkeypatch.setattr(documents, "BLOCK_BYTES", block_bytes)
    with pytest.raises(BadInputError, match=rf"part\.jsonl\.zst:{bad + 1}: document 'd20': 'text' must be a string"):
        list(documents.read_documents(path))


class _Recorder:
    """A compressing writer that records which thread wrote each block, and when."""

    def __init__(self, raw, fail_at: int | None = None) -> None:
        self.raw, self.fail_at, self.calls = raw, fail_at, []

    def write(self, data: bytes) -> int:
        if len(self.calls) == self.fail_at:
            raise OSError("disk full (on purpose)")
        self.calls.append((threading.get_ident(), bytes(data)))
        return self.raw.write(data)

    def close(self) -> None:
        pass


def test_line_blocks_are_written_in_order_by_one_other_thread_at_most_two_behind(tmp_path, monkeypatch):
    recorders: list[_Recorder] = []
    monkeypatch.setattr(documents, "_compressing", lambda raw, target, level: recorders.append(_Recorder(raw))
                        or recorders[-1])
    blocks = [b"".join(_lines(k + 1)[k:]) + b"\n" for k in range(12)]
    written_before: list[int] = []

    def made():
        for block in blocks:
            written_before.append(len(recorders[0].calls) if recorders else 0)
            yield block

    digest = hashlib.sha256()
    documents.write_line_blocks(str(tmp_path / "out.jsonl.zst"), made(), sha256=digest)
    threads = {thread for thread, _ in recorders[0].calls}
    assert [data for _, data in recorders[0].calls] == blocks
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert all(before >= k - documents.WRITE_BEHIND - 1 for k, before in enumerate(written_before))
    assert (tmp_path / "out.jsonl.zst").read_bytes() == b"".join(blocks)
    assert digest.hexdigest() == hashlib.sha256(b"".join(blocks)).hexdigest()


def test_line_blocks_compressed_behind_make_the_file_written_line_by_line(tmp_path):
    lines = _lines(3000)
    blocks = [b"".join(line + b"\n" for line in lines[k:k + 250]) for k in range(0, 3000, 250)]
    digest = hashlib.sha256()
    documents.write_line_blocks(str(tmp_path / "blocks.jsonl.zst"), blocks, level=2, sha256=digest)
    documents.write_json_lines(str(tmp_path / "lines.jsonl.zst"), lines, level=2)
    written = (tmp_path / "blocks.jsonl.zst").read_bytes()
    assert written == (tmp_path / "lines.jsonl.zst").read_bytes()
    assert digest.hexdigest() == hashlib.sha256(written).hexdigest()


@pytest.mark.parametrize("failing", ["writer", "writer at the last block", "blocks"])
def test_an_error_on_either_side_of_the_writer_thread_is_raised_and_leaves_no_file(tmp_path, monkeypatch, failing):
    fail_at = {"writer": 3, "writer at the last block": 7}.get(failing)
    monkeypatch.setattr(documents, "_compressing", lambda raw, target, level: _Recorder(raw, fail_at))

    def made():
        for k in range(8):
            if failing == "blocks" and k == 5:
                raise ValueError("bad block (on purpose)")
            yield b"line\n"

    with pytest.raises(ValueError if failing == "blocks" else OSError, match="on purpose"):
        documents.write_line_blocks(str(tmp_path / "out.jsonl.zst"), made())
    assert list(tmp_path.iterdir()) == []


def test_blocks_are_decompressed_one_ahead_in_another_thread_and_closing_early_closes_the_file(tmp_path,
                                                                                              monkeypatch):
    raw = _raw("plain", 400)
    path = _write(tmp_path, raw, ".jsonl.zst")
    made_in, closed, second_made = [], [], threading.Event()
    real = documents._line_blocks_of

    def recorded(path: str, block_bytes: int):
        try:
            for block in real(path, block_bytes):
                made_in.append(threading.get_ident())
                if len(made_in) == 2:
                    second_made.set()
                yield block
        finally:
            closed.append(threading.get_ident())

    monkeypatch.setattr(documents, "_line_blocks_of", recorded)
    blocks = documents.decompressed_blocks(path, 4096)
    assert b"".join(blocks) == raw
    assert len(made_in) > 5 and threading.get_ident() not in made_in and closed
    made_in.clear()
    second_made.clear()
    blocks = documents.decompressed_blocks(path, 4096)
    first = next(blocks)
    assert second_made.wait(30), "the block after the one handed out is not being made"
    assert raw.startswith(first) and len(made_in) == 2  # that one only: one block ahead
    blocks.close()
    assert closed[-1] == threading.get_ident() and len(closed) == 2  # closed once the other thread stopped


def test_an_error_decompressing_ahead_is_raised_to_the_reader(tmp_path):
    path = tmp_path / "part.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_raw("plain", 400))[:-40] + b"\0" * 40)
    with pytest.raises(zstandard.ZstdError):
        list(documents.decompressed_blocks(str(path), 4096))


def test_the_reader_and_writer_threads_run_in_the_callers_context(tmp_path, monkeypatch):
    """The step's storage options reach `open_file` through a context variable (executor's location
    helpers): the threads must see the caller's, or a bucket's file opens without its options."""
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="none")
    seen: list[str] = []
    real_open = documents.open_file
    monkeypatch.setattr(documents, "open_file", lambda *a, **k: seen.append(marker.get()) or real_open(*a, **k))
    path = _write(tmp_path, _raw("plain"), ".jsonl.zst")
    recorders: list[_Recorder] = []

    class _Seeing(_Recorder):
        def write(self, data: bytes) -> int:
            seen.append(marker.get())
            return super().write(data)

    monkeypatch.setattr(documents, "_compressing", lambda raw, target, level: recorders.append(_Seeing(raw))
                        or recorders[-1])
    token = marker.set("the step's")
    try:
        assert list(documents.read_documents(path))
        documents.write_line_blocks(str(tmp_path / "out.jsonl.zst"), [b"a\n", b"b\n"])
    finally:
        marker.reset(token)
    assert seen and set(seen) == {"the step's"}
