"""Exact dedup against the synthetic corpus's ground truth, shard/worker invariance, paragraphs, resume."""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys

import orjson
import pytest

from steps.dedup import ExactDedupConfig, exact_dedup, filter_shard
from steps.documents import list_document_files, read_documents, write_documents


def test_finds_exactly_the_injected_copies(dedup_corpus, dedup_corpus_dirs, tmp_path, read_attributes, kept_ids):
    out = str(tmp_path / "out")
    result = exact_dedup(ExactDedupConfig(dedup_corpus_dirs[4], out))
    attributes = read_attributes(out)
    removed = {doc_id: a["duplicate_of"] for doc_id, a in attributes.items()}
    assert removed == dedup_corpus.exact_copies  # same copies, each pointing at its original
    assert {a["reason"] for a in attributes.values()} == {"exact_document"}
    all_ids = [d["id"] for d in dedup_corpus.docs]
    assert kept_ids(out) == [i for i in all_ids if i not in dedup_corpus.exact_copies]
    assert result["documents_in"] == len(all_ids)
    assert result["duplicate_documents"] == len(dedup_corpus.exact_copies)
    assert result["documents_out"] == len(all_ids) - len(dedup_corpus.exact_copies)
    json.dumps(result)  # the record must be JSON


def test_same_result_for_one_and_four_shards(dedup_corpus_dirs, tmp_path, read_attributes, kept_ids):
    one, four = str(tmp_path / "one"), str(tmp_path / "four")
    exact_dedup(ExactDedupConfig(dedup_corpus_dirs[1], one))
    exact_dedup(ExactDedupConfig(dedup_corpus_dirs[4], four))
    assert kept_ids(one) == kept_ids(four)
    strip = lambda attrs: {k: v["duplicate_of"] for k, v in attrs.items()}  # noqa: E731
    assert strip(read_attributes(one)) == strip(read_attributes(four))


def test_real_ray_path_finds_the_same_copies(ray_local, dedup_corpus, dedup_corpus_dirs, tmp_path,
                                             read_attributes):
    from executor.engine.runner.ray_runner import ray_is_active

    assert ray_is_active()  # map_shards takes the Ray path: one Ray task per shard
    out = str(tmp_path / "ray")
    result = exact_dedup(ExactDedupConfig(dedup_corpus_dirs[4], out))
    assert {k: a["duplicate_of"] for k, a in read_attributes(out).items()} == dedup_corpus.exact_copies
    assert result["shards"] == 4


def test_paragraph_level_removes_repeated_lines_once_seen(tmp_path, kept_ids):
    shared = "This licence paragraph is repeated verbatim on several pages of the site."
    docs = [
        {"id": "a", "text": f"Alpha body one.\n{shared}\nAlpha end."},
        {"id": "b", "text": f"{shared}\nBeta body, different from alpha."},
        {"id": "c", "text": shared},               # nothing left after removal: dropped
        {"id": "d", "text": "Short\nShort"},        # lines under min_paragraph_chars stay
    ]
    write_documents(str(tmp_path / "in" / "p.jsonl.zst"), docs)
    out = str(tmp_path / "out")
    result = exact_dedup(ExactDedupConfig(str(tmp_path / "in"), out, paragraphs=True, min_paragraph_chars=20))
    kept = {d["id"]: d["text"] for d in read_documents(f"{out}/docs/p.jsonl.zst")}
    assert kept == {"a": docs[0]["text"], "b": "Beta body, different from alpha.", "d": "Short\nShort"}
    assert result["duplicate_paragraphs"] == 2
    # the attributes re-applied to the input give the same documents (the filter is reusable)
    attributes = [json.loads(l) for l in _lines(f"{out}/attributes/p.jsonl.zst")]
    assert [d["id"] for d in filter_shard(str(tmp_path / "in" / "p.jsonl.zst"), attributes)] == ["a", "b", "d"]
    assert attributes[0]["duplicate_spans"][0][2] == "a"


def test_resume_skips_committed_shards(dedup_corpus_dirs, tmp_path, kept_ids):
    out = str(tmp_path / "out")
    first = exact_dedup(ExactDedupConfig(dedup_corpus_dirs[4], out))
    marker = f"{out}/shards/part-00002.json"
    before = os.stat(f"{out}/docs/part-00002.jsonl.zst").st_mtime_ns
    os.remove(f"{out}/shards/part-00003.json")   # as if the run died before committing shard 3
    os.makedirs(f"{out}/.executor", exist_ok=True)
    for leftover in (f"{out}/docs/part-00003.jsonl.zst.tmp-123-abc", f"{out}/.executor/status.json.tmp-9"):
        with open(leftover, "w") as f:
            f.write("partial")
    second = exact_dedup(ExactDedupConfig(dedup_corpus_dirs[4], out))
    assert not os.path.exists(f"{out}/docs/part-00003.jsonl.zst.tmp-123-abc")  # the dead attempt's temporary
    assert os.path.exists(f"{out}/.executor/status.json.tmp-9")  # the executor's files are not ours to touch
    assert os.path.exists(marker)
    assert second["shards_resumed"] == 3
    assert os.stat(f"{out}/docs/part-00002.jsonl.zst").st_mtime_ns == before
    assert second["documents_out"] == first["documents_out"]


def _lines(path):
    from steps.documents import open_binary_lines
    with open_binary_lines(path) as f:
        return [l for l in f if l.strip()]


def test_empty_input_is_an_error(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.jsonl").write_bytes(b"")
    with pytest.raises(ValueError, match="no documents"):
        exact_dedup(ExactDedupConfig(str(tmp_path / "in"), str(tmp_path / "out")))
    assert list_document_files(str(tmp_path / "in")) == [str(tmp_path / "in" / "empty.jsonl")]


def _jsonl(docs) -> bytes:
    """Lines as Python's json writes them (spaces after separators, escaped non-ASCII), unlike ours."""
    return b"".join(json.dumps(d).encode() + b"\n" for d in docs)


def test_untouched_documents_are_copied_byte_for_byte(tmp_path):
    shared = "A licence line repeated verbatim on several pages of the site, long enough."
    docs = [{"id": f"d{i}", "text": f"Caf\u00e9 \u6771\u4eac page {i}, \u00a9 2024", "lang": "fr", "score": i / 3}
            for i in range(40)]
    docs[7]["text"] = docs[3]["text"]                      # an exact copy: removed
    docs[11]["text"] = f"Own words of eleven.\n{shared}"   # keeps its first line once 12 holds the line
    docs[9]["text"] = f"{shared}\nNine's own text."
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(_jsonl(docs[:30]))   # read as several byte ranges below
    with gzip.open(tmp_path / "in" / "b.jsonl.gz", "wb") as f:
        f.write(_jsonl(docs[30:]))
    out = str(tmp_path / "out")
    result = exact_dedup(ExactDedupConfig(str(tmp_path / "in"), out, paragraphs=True, min_paragraph_chars=20,
                                          shard_bytes=1000))
    assert result["shards"] > 3  # a.jsonl was split, so the copy works on byte ranges too
    written = b"".join(b"".join(_lines(path)) for path in sorted(glob.glob(f"{out}/docs/*.jsonl.zst")))
    copied = [d for i, d in enumerate(docs) if i not in (7, 11)]
    rewritten_11 = orjson.dumps({**docs[11], "text": "Own words of eleven.\n"}) + b"\n"
    expected = _jsonl(copied[:10]) + rewritten_11 + _jsonl(copied[10:])
    assert written == expected
    kept_texts = [d["text"] for path in sorted(glob.glob(f"{out}/docs/*.jsonl.zst")) for d in read_documents(path)]
    assert result["text_bytes_out"] == sum(len(t.encode()) for t in kept_texts)
    assert result["documents_out"] == len(kept_texts) == 39


@pytest.mark.parametrize("copied", [True, False], ids=["lines copied", "documents written again"])
def test_kept_documents_are_compressed_at_zstd_level_2(tmp_path, copied):
    """docs/steps.md: exact dedup writes kept documents at zstd level 2 (the file is the one a level-2
    stream writer makes of its lines), whether untouched lines are copied or documents written again."""
    import io

    import zstandard

    docs = [{"id": f"d{i}" if copied else i, "text": f"Caf\u00e9 \u6771\u4eac page {i % 30}, \u00a9 2024"}
            for i in range(400)]
    write_documents(str(tmp_path / "in" / "p.jsonl.zst"), docs)
    exact_dedup(ExactDedupConfig(str(tmp_path / "in"), str(tmp_path / "out")))
    written = (tmp_path / "out" / "docs" / "p.jsonl.zst").read_bytes()
    lines = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(written)).read()
    assert len(lines.splitlines()) == 30
    for level, same in ((2, True), (3, False)):
        expected = io.BytesIO()
        with zstandard.ZstdCompressor(level=level).stream_writer(expected, closefd=False) as writer:
            writer.write(lines)
        assert (expected.getvalue() == written) is same


@pytest.mark.parametrize("odd_line", ["integer id", "bad line"])
def test_a_shard_with_an_integer_id_or_a_skipped_line_is_parsed_and_written_again(tmp_path, odd_line):
    docs = [{"id": "a", "text": "first"}, {"id": "b", "text": "first"}, {"id": "c", "text": "third"}]
    lines = [json.dumps(d).encode() for d in docs]
    lines.insert(1, b'{"id": 7, "text": "seven"}' if odd_line == "integer id" else b'{"id": "x", "text": 3}')
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = str(tmp_path / "out")
    result = exact_dedup(ExactDedupConfig(str(tmp_path / "in"), out, on_bad_line="skip"))
    kept = [orjson.loads(line) for line in _lines(f"{out}/docs/p.jsonl.zst")]
    survivors = ["a", "7", "c"] if odd_line == "integer id" else ["a", "c"]
    assert [d["id"] for d in kept] == survivors   # ids as strings, and "b" (a copy of "a") removed
    assert _lines(f"{out}/docs/p.jsonl.zst") == [orjson.dumps(d) + b"\n" for d in kept]  # our serialisation
    assert result["text_bytes_out"] == sum(len(d["text"]) for d in kept)


def test_dedup_never_imports_pandas(tmp_path):
    """pyarrow's conversions import pandas when it is installed (0.2-0.6 s a process), and its casts and takes
    pyarrow.compute (0.1 s); the shuffle avoids both. Fuzzy dedup's word hashing imports pyarrow.compute
    (its split and dictionary encoding), so exact dedup is checked before fuzzy dedup runs."""
    pytest.importorskip("pandas")
    docs = [{"id": f"d{i}", "text": f"text {i % 5}"} for i in range(50)]
    write_documents(str(tmp_path / "in" / "p.jsonl"), docs)
    script = ("import sys\n"
              "from steps.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup, fuzzy_dedup\n"
              f"r = exact_dedup(ExactDedupConfig({str(tmp_path / 'in')!r}, {str(tmp_path / 'exact')!r},"
              " paragraphs=True, min_paragraph_chars=1))\n"
              "exact_imported_compute = 'pyarrow.compute' in sys.modules\n"
              f"f = fuzzy_dedup(FuzzyDedupConfig({str(tmp_path / 'in')!r}, {str(tmp_path / 'fuzzy')!r}))\n"
              "print(r['documents_out'], f['documents_out'], 'pandas' in sys.modules, exact_imported_compute)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5", "5", "False", "False"]


def test_the_result_says_how_many_nodes_ran_each_stage(tmp_path):
    docs = [{"id": f"d{i}", "text": f"line {i % 3}\nshared paragraph long enough to count"} for i in range(9)]
    write_documents(str(tmp_path / "in" / "p.jsonl"), docs)
    plain = exact_dedup(ExactDedupConfig(str(tmp_path / "in"), str(tmp_path / "a")))
    assert plain["nodes_per_stage"] == {"hash": 1, "reduce": 1, "write": 1}   # one process: one node
    both = exact_dedup(ExactDedupConfig(str(tmp_path / "in"), str(tmp_path / "b"), paragraphs=True))
    assert both["nodes_per_stage"] == {"hash": 1, "reduce": 1, "paragraph-hash": 1, "paragraph-reduce": 1, "write": 1}
