"""Dedup at scale, in one process: big files split into shards, Parquet in and out, kept sets that do
not depend on partition or shard counts, and a run killed mid-stage (SIGKILL) that resumes."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from steps.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup, fuzzy_dedup
from steps.documents import (list_document_files, plan_document_shards, read_documents, read_shard,
                             write_documents)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def one_big_file(dedup_corpus, tmp_path_factory) -> str:
    """The dedup corpus as one uncompressed .jsonl file (~1.4 MB)."""
    directory = tmp_path_factory.mktemp("big-file")
    write_documents(str(directory / "all.jsonl"), dedup_corpus.docs)
    return str(directory)


def _total_bytes(directory: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(f"{directory}/*"))


def test_a_big_file_is_read_as_several_line_aligned_shards(dedup_corpus, one_big_file):
    files = list_document_files(one_big_file)
    shards = plan_document_shards(files, shard_bytes=_total_bytes(one_big_file) // 7)
    assert len(shards) == 7
    assert [d for s in shards for d in read_shard(s)] == dedup_corpus.docs  # every line once, in order


def test_a_shard_boundary_on_a_line_start_loses_no_line(tmp_path):
    docs = [{"id": f"{i:03d}", "text": "x" * 20} for i in range(100)]   # lines of equal length
    write_documents(str(tmp_path / "even.jsonl"), docs)
    line = len((tmp_path / "even.jsonl").read_bytes()) // 100
    shards = plan_document_shards([str(tmp_path / "even.jsonl")], shard_bytes=10 * line)
    assert len(shards) == 10 and all(s.start % line == 0 for s in shards)
    assert [d for s in shards for d in read_shard(s)] == docs


@pytest.mark.parametrize("partitions", [1, 3, 17])
def test_exact_kept_set_is_the_same_for_any_partition_and_shard_count(
        partitions, dedup_corpus, one_big_file, dedup_corpus_dirs, tmp_path, kept_ids, read_attributes):
    reference = str(tmp_path / "reference")
    exact_dedup(ExactDedupConfig(dedup_corpus_dirs[4], reference))
    out = str(tmp_path / "split")
    size = _total_bytes(one_big_file)
    result = exact_dedup(ExactDedupConfig(one_big_file, out, shard_bytes=size // 5,
                                          partition_bytes=-(-size // partitions)))
    assert result["partitions"] == partitions and result["shards"] == 5
    assert len(glob.glob(f"{out}/docs/*.jsonl.zst")) == 5
    assert kept_ids(out) == kept_ids(reference)
    assert {k: a["duplicate_of"] for k, a in read_attributes(out).items()} == dedup_corpus.exact_copies
    assert not os.path.exists(f"{out}/.work")  # the shuffle files are gone once the step is done


@pytest.mark.parametrize("partitions", [1, 3, 17])
def test_fuzzy_kept_set_is_the_same_for_any_partition_and_shard_count(
        partitions, one_big_file, dedup_corpus_dirs, tmp_path, kept_ids, read_attributes):
    reference = str(tmp_path / "reference")
    fuzzy_dedup(FuzzyDedupConfig(dedup_corpus_dirs[1], reference, partition_bytes=1 << 40))
    out = str(tmp_path / "split")
    size = _total_bytes(one_big_file)
    result = fuzzy_dedup(FuzzyDedupConfig(one_big_file, out, shard_bytes=size // 3,
                                          partition_bytes=-(-size // partitions)))
    assert result["partitions"] == partitions and result["shards"] == 3
    assert kept_ids(out) == kept_ids(reference)
    strip = lambda attrs: {k: (a["duplicate_of"], a["jaccard"]) for k, a in attrs.items()}  # noqa: E731
    assert strip(read_attributes(out)) == strip(read_attributes(reference))


def test_parquet_in_and_out_round_trips_ids_and_texts(dedup_corpus, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = dedup_corpus.docs
    (tmp_path / "in").mkdir()
    table = pa.table({"doc_id": [d["id"] for d in docs], "body": [d["text"] for d in docs]})
    pq.write_table(table, tmp_path / "in" / "corpus.parquet", row_group_size=200)  # 6 row groups
    out = str(tmp_path / "out")
    result = exact_dedup(ExactDedupConfig(str(tmp_path / "in"), out, text_column="body", id_column="doc_id",
                                          output_format="parquet", shard_bytes=1))
    assert result["shards"] == pq.ParquetFile(tmp_path / "in" / "corpus.parquet").num_row_groups == 6
    kept = [d for p in sorted(glob.glob(f"{out}/docs/*.parquet")) for d in read_documents(p)]
    assert kept == [d for d in docs if d["id"] not in dedup_corpus.exact_copies]
    assert pq.read_table(sorted(glob.glob(f"{out}/docs/*.parquet"))[0]).column_names == ["id", "text"]


def test_wrong_parquet_column_and_output_format_are_clear_errors(tmp_path):
    write_documents(str(tmp_path / "in" / "p.parquet"), [{"id": "a", "text": "x"}])
    with pytest.raises(Exception, match="no column 'body'.*text_column"):
        exact_dedup(ExactDedupConfig(str(tmp_path / "in"), str(tmp_path / "out"), text_column="body"))
    with pytest.raises(ValueError, match="output_format='csv'"):
        FuzzyDedupConfig("in", "out", output_format="csv")


_KILLABLE_RUN = """
import sys
from steps.dedup import FuzzyDedupConfig, fuzzy_dedup
fuzzy_dedup(FuzzyDedupConfig(sys.argv[1], sys.argv[2], shard_bytes=int(sys.argv[3]), partition_bytes=int(sys.argv[4])))
"""


def test_a_run_killed_mid_stage_resumes_to_the_identical_result(one_big_file, tmp_path, kept_ids, read_attributes):
    size = _total_bytes(one_big_file)
    args = [one_big_file, str(tmp_path / "killed"), str(size // 4), str(size // 5)]
    process = subprocess.Popen([sys.executable, "-c", _KILLABLE_RUN, *args], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = tmp_path / "killed" / ".work" / "fuzzy" / "verify" / "done"
    deadline = time.monotonic() + 300
    while not (done.exists() and any(done.iterdir())) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed mid-stage"
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = fuzzy_dedup(FuzzyDedupConfig(*args[:2], shard_bytes=int(args[2]), partition_bytes=int(args[3])))
    assert resumed["tasks_resumed"] >= 4 + 5  # at least the minhash and lsh stages came from their markers
    clean = str(tmp_path / "clean")
    fuzzy_dedup(FuzzyDedupConfig(one_big_file, clean))
    assert kept_ids(args[1]) == kept_ids(clean)
    strip = lambda attrs: {k: (a["duplicate_of"], a["jaccard"]) for k, a in attrs.items()}  # noqa: E731
    assert strip(read_attributes(args[1])) == strip(read_attributes(clean))
    json.dumps(resumed)
