"""Fuzzy dedup: recall on injected near copies, precision 1.0, boilerplate pages kept, invariance."""

from __future__ import annotations

import numpy as np
import pytest

from steps.dedup import FuzzyDedupConfig, fuzzy_dedup
from steps.dedup.fuzzy import lsh_candidate_pairs
from steps.dedup.minhash import jaccard, make_permutations, minhash_signatures, shingle_hashes
from steps.documents import write_documents


@pytest.fixture(scope="module")
def fuzzy_outputs(dedup_corpus_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzy")
    results = {}
    for shards in (1, 4):
        out = str(root / f"out-{shards}")
        results[shards] = (out, fuzzy_dedup(FuzzyDedupConfig(dedup_corpus_dirs[shards], out)))
    return results


def test_recall_and_precision_against_ground_truth(dedup_corpus, fuzzy_outputs, read_attributes):
    out, result = fuzzy_outputs[4]
    removed = {k: a["duplicate_of"] for k, a in read_attributes(out).items()}
    truth = {**dedup_corpus.exact_copies, **dedup_corpus.near_copies}
    false_positives = set(removed) - set(truth)
    assert not false_positives, f"removed documents that are not duplicates: {sorted(false_positives)[:5]}"
    assert all(removed[k] == truth[k] for k in removed)  # each points at its original
    near_found = sum(k in removed for k in dedup_corpus.near_copies) / len(dedup_corpus.near_copies)
    assert near_found >= 0.95, near_found
    assert all(k in removed for k in dedup_corpus.exact_copies)
    assert result["duplicate_documents"] == len(removed)
    assert all(a["jaccard"] >= 0.8 for a in read_attributes(out).values())
    assert result["nodes_per_stage"] == {stage: 1 for stage in (  # one process: one node; rounds together
        "minhash", "lsh", "candidate-shingles", "verify", "components", "root-pairs", "check-shingles", "check",
        "write")}


def test_boilerplate_sharing_pages_are_kept(dedup_corpus, fuzzy_outputs, read_attributes):
    out, result = fuzzy_outputs[4]
    removed = read_attributes(out)
    pages = [p for family in dedup_corpus.boilerplate_families for p in family]
    assert not [p for p in pages if p in removed]
    # the test means something only if LSH did propose such pages and verification rejected them
    assert result["rejected_pairs"] > 0


def test_same_result_for_one_and_four_shards(fuzzy_outputs, read_attributes, kept_ids):
    (one, r1), (four, r4) = fuzzy_outputs[1], fuzzy_outputs[4]
    assert kept_ids(one) == kept_ids(four)
    without_index = lambda attrs: {k: {**a, "index": None} for k, a in attrs.items()}  # noqa: E731
    assert without_index(read_attributes(one)) == without_index(read_attributes(four))
    assert r1["candidate_pairs"] == r4["candidate_pairs"]


def test_verification_rejects_what_minhash_alone_would_merge(tmp_path, read_attributes):
    """Two pages sharing most of their words but not 80% of their 5-gram shingles stay."""
    base = " ".join(f"word{i}" for i in range(200))
    variant = " ".join(f"word{i}" if i % 9 else f"other{i}" for i in range(200))
    near = base + " extra tail words here"
    write_documents(str(tmp_path / "in" / "p.jsonl"), [
        {"id": "base", "text": base}, {"id": "variant", "text": variant}, {"id": "near", "text": near}])
    out = str(tmp_path / "out")
    # loose LSH (many short bands) proposes every pair; verification decides
    fuzzy_dedup(FuzzyDedupConfig(str(tmp_path / "in"), out, num_bands=32, rows_per_band=1))
    assert {k: a["duplicate_of"] for k, a in read_attributes(out).items()} == {"near": "base"}


def test_minhash_estimates_jaccard():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in rng.integers(0, 5000, 600)]
    a_text = " ".join(words)
    b_text = " ".join(words[:500] + [f"x{i}" for i in range(100)])
    sa, sb = shingle_hashes(a_text, 5), shingle_hashes(b_text, 5)
    true = jaccard(np.unique(sa), np.unique(sb))
    a, b = make_permutations(256, seed=1)
    sig = minhash_signatures([sa, sb, np.zeros(0, np.uint64)], a, b)
    assert abs((sig[0] == sig[1]).mean() - true) < 0.08
    assert (sig[2] == np.iinfo(np.uint32).max).all()  # no shingles: marked, excluded from LSH
    assert shingle_hashes("One two", 5).shape == (1,)  # shorter than n: one shingle
    assert shingle_hashes("Hello, WORLD again", 2).tolist() == shingle_hashes("hello world   again!", 2).tolist()


def test_lsh_pairs_share_a_band():
    sig = np.array([[1, 2, 3, 4], [1, 2, 9, 9], [7, 7, 3, 4], [5, 5, 5, 5]], np.uint32)
    pairs = lsh_candidate_pairs(sig, np.ones(4, bool), num_bands=2, rows_per_band=2)
    assert pairs.tolist() == [[0, 1], [0, 2]]
    assert lsh_candidate_pairs(sig, np.array([False, True, True, True]), 2, 2).tolist() == []


def test_config_rejects_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        FuzzyDedupConfig("in", "out", threshold=1.5)


def test_buckets_up_to_small_bucket_propose_all_pairs_larger_ones_pairs_with_their_head():
    from itertools import combinations

    from steps.dedup.fuzzy import SMALL_BUCKET, bucket_pairs

    small = np.arange(SMALL_BUCKET) * 3 + 100        # one bucket of exactly SMALL_BUCKET members
    large = np.arange(SMALL_BUCKET + 1) * 5 + 1000   # one just over it
    keys = np.r_[np.full(len(small), 7), np.full(len(large), 9), 11].astype(np.uint64)  # 11: alone, no pair
    members = np.r_[small, large, 5000][::-1].copy()
    keys = keys[::-1].copy()                          # input order does not matter
    pairs = {tuple(p) for p in bucket_pairs(keys, members).tolist()}
    assert pairs == set(combinations(small.tolist(), 2)) | {(int(large[0]), int(m)) for m in large[1:]}
