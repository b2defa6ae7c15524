"""Exact dedup against the synthetic corpus's ground truth, shard/worker invariance, paragraphs, resume."""

from __future__ import annotations

import json
import os

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
