"""Fuzzy dedup's shingles stage finds the documents it was asked for a block of lines at a time
(steps/dedup/fuzzy.py `_wanted_lines`): the same lines as reading the shard line by line, across
block boundaries, blank and whitespace-only lines, CRLF line ends and a last line without a newline,
in plain and zstd-compressed JSONL; and a fuzzy dedup of such a corpus removes the same documents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zstandard

from steps.dedup import FuzzyDedupConfig, fuzzy_dedup
from steps.dedup import fuzzy
from steps.dedup.fuzzy import _wanted_lines
from steps.documents import DocumentShard, read_shard_lines


def read_attributes(output: object) -> list[dict]:
    found = []
    for path in sorted(Path(str(output), "attributes").glob("*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read()
        found += [json.loads(line) for line in data.splitlines() if line.strip()]
    return found


def _lines(rng: np.random.Generator, count: int) -> list[bytes]:
    """JSONL lines (~700 bytes each) with blank lines, CRLF ends and leading blanks among them."""
    lines = []
    for i in range(count):
        text = " ".join(f"w{int(x)}" for x in rng.integers(0, 500, 120))
        line = json.dumps({"id": f"d{i}", "text": text}).encode()
        kind = int(rng.integers(0, 12))
        if kind == 0:
            lines.append(b"\n")  # a blank line before the document
        elif kind == 1:
            lines.append(b" \t \r\n")  # a whitespace-only line
        elif kind == 2:
            line = b"  " + line  # a document line that starts with blanks
        lines.append(line + (b"\r\n" if kind == 3 else b"\n"))
    return lines


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_the_wanted_lines_are_the_ones_reading_line_by_line_finds(tmp_path, suffix):
    rng = np.random.default_rng(7)
    data = b"".join(_lines(rng, 4000)).rstrip(b"\n")  # ~2.8 MB: several 1 MiB blocks, no final newline
    path = tmp_path / f"shard{suffix}"
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if suffix.endswith(".zst") else data)
    every = [line.rstrip(b"\n") for line in read_shard_lines(DocumentShard(str(path)))]
    assert len(every) == 4000
    for wanted in ([0], [3999], [0, 1, 2, 1497, 1498, 3998, 3999], sorted(rng.choice(4000, 300, replace=False)),
                   list(range(4000))):
        found = list(_wanted_lines(str(path), dict.fromkeys(wanted)))
        assert found == [(i, every[i]) for i in wanted]


def test_a_corpus_with_blank_lines_and_crlf_is_deduplicated_as_without_them(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    docs = [" ".join(f"w{int(x)}" for x in rng.integers(0, 5000, 200)) for _ in range(60)]
    docs += [d.replace("w1", "w2", 1) for d in docs[:20]] + docs[20:30]  # near and exact copies
    records = [json.dumps({"id": f"d{i}", "text": t}).encode() for i, t in enumerate(docs)]
    plain, messy = tmp_path / "plain", tmp_path / "messy"
    for folder in (plain, messy):
        folder.mkdir()
    for k in range(2):
        part = records[k::2]
        (plain / f"part-{k}.jsonl").write_bytes(b"\n".join(part) + b"\n")
        (messy / f"part-{k}.jsonl").write_bytes(b"\n \n".join(b"  " + r + b"\r" for r in part))
    searched = []
    monkeypatch.setattr(fuzzy, "_wanted_lines", lambda path, wanted: searched.append(path) or _wanted_lines(path, wanted))
    removed = []
    for folder in (plain, messy):
        fuzzy_dedup(FuzzyDedupConfig(str(folder), str(tmp_path / f"out-{folder.name}")))
        removed.append(sorted((a["id"], a["duplicate_of"]) for a in read_attributes(tmp_path / f"out-{folder.name}")))
    assert removed[0] == removed[1] and len(removed[0]) >= 20
    assert {p.rpartition("/")[0] for p in searched} == {str(plain), str(messy)}  # both took the block path
