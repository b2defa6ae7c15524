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
    """The promise (tests/README.md) is 8 members, written here as a number: a test reading the
    module's SMALL_BUCKET would follow it down to 2, where small buckets propose head pairs only."""
    from itertools import combinations

    from steps.dedup.fuzzy import bucket_pairs

    small = np.arange(8) * 3 + 100        # one bucket of exactly 8 members
    large = np.arange(9) * 5 + 1000   # one just over it
    keys = np.r_[np.full(len(small), 7), np.full(len(large), 9), 11].astype(np.uint64)  # 11: alone, no pair
    members = np.r_[small, large, 5000][::-1].copy()
    keys = keys[::-1].copy()                          # input order does not matter
    pairs = {tuple(p) for p in bucket_pairs(keys, members).tolist()}
    assert pairs == set(combinations(small.tolist(), 2)) | {(int(large[0]), int(m)) for m in large[1:]}


def test_a_near_copy_sharing_buckets_only_with_a_bucket_s_head_and_another_member_is_proposed():
    """Three documents in the same bucket of every band: the third, a near copy of the second,
    shares no bucket with it apart from the first document (the head). Their pair must still be
    a candidate (small buckets propose all their pairs), or the near copy is never compared."""
    signatures = np.array([[5, 6, 7], [5, 6, 7], [5, 6, 7]], np.uint32)
    pairs = lsh_candidate_pairs(signatures, np.ones(3, bool), num_bands=3, rows_per_band=1)
    assert pairs.tolist() == [[0, 1], [0, 2], [1, 2]]


def _reference_shingles(text: str, n: int) -> list[int]:
    """minhash.py's documented shingle hash, one text at a time in Python integers."""
    import re

    import xxhash

    mask, mult = (1 << 64) - 1, 0x9E3779B97F4A7C15
    hashes = [xxhash.xxh3_64_intdigest(w) for w in re.findall(r"\w+", text.lower())]
    n = min(n, len(hashes))
    shingles = []
    for i in range(len(hashes) - n + 1 if hashes else 0):
        acc = hashes[i]
        for h in hashes[i + 1:i + n]:
            acc = (acc * mult + h) & mask
        for m in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, None):
            acc ^= acc >> 33
            acc = (acc * m) & mask if m else acc
        shingles.append(acc)
    return shingles


def test_a_batch_of_texts_gives_each_text_its_own_shingles():
    """Batched hashing (texts of any length, ASCII or not, next to each other) equals hashing each
    text alone; ASCII text split without the regex gives the regex's words."""
    from steps.dedup.minhash import WORD, shingle_batch, unique_per_text, words

    rng = np.random.default_rng(0)
    every_ascii = "".join(chr(c) for c in rng.integers(0, 128, 5000))
    texts = ["", "One", "one Two", "a b c d", "a b c d e", "!!!", every_ascii, "Ünïcödé café, 日本語 テキスト x y",
             " ".join(f"w{i % 7}" for i in range(60)), "x_1 Y_2 z3 ÀB"]
    assert words(every_ascii) == WORD.findall(every_ascii.lower())
    for n in (1, 3, 5):
        hashes, counts = shingle_batch(texts, n)
        assert counts.tolist() == [len(_reference_shingles(t, n)) for t in texts]
        assert hashes.tolist() == [h for t in texts for h in _reference_shingles(t, n)]
        assert [u.tolist() for u in unique_per_text(hashes, counts)] == [sorted(set(_reference_shingles(t, n)))
                                                                          for t in texts]


def test_signatures_do_not_depend_on_the_cache_blocks(monkeypatch):
    """Signatures computed block by block (documents straddling no block) equal the plain minimum."""
    from steps.dedup import minhash

    rng = np.random.default_rng(1)
    shingles = [rng.integers(0, 2**63, size, dtype=np.uint64) for size in (0, 1, 50, 3, 0, 200, 7)]
    a, b = make_permutations(16, seed=2)
    with np.errstate(over="ignore"):
        expected = np.array([[((s >> np.uint64(32)) * a[k] + b[k]).min() >> np.uint64(32) if len(s) else 2**32 - 1
                              for k in range(16)] for s in shingles], np.uint32)
    for block in (1, 40, 1 << 15):
        monkeypatch.setattr(minhash, "_BLOCK_SHINGLES", block)
        assert (minhash_signatures(shingles, a, b) == expected).all(), block


def test_a_member_without_a_verified_edge_to_its_canonical_document_is_checked(tmp_path, read_attributes):
    """A ~ B and B ~ C but not A ~ C: B is removed by its verified edge to A; C (labelled A through B)
    has no edge to A, goes through the check stage, and stays."""
    base = [f"word{i}" for i in range(200)]
    b_words = [w if i not in (50, 100, 150) else f"b{i}" for i, w in enumerate(base)]
    c_words = [w if i not in (25, 75, 125) else f"c{i}" for i, w in enumerate(b_words)]
    sets = [np.unique(shingle_hashes(" ".join(w), 5)) for w in (base, b_words, c_words)]
    assert jaccard(sets[0], sets[1]) >= 0.8 and jaccard(sets[1], sets[2]) >= 0.8 > jaccard(sets[0], sets[2])
    write_documents(str(tmp_path / "in" / "p.jsonl"), [
        {"id": "A", "text": " ".join(base)}, {"id": "B", "text": " ".join(b_words)},
        {"id": "C", "text": " ".join(c_words)}])
    out = str(tmp_path / "out")
    result = fuzzy_dedup(FuzzyDedupConfig(str(tmp_path / "in"), out, num_bands=32, rows_per_band=1))
    assert {k: a["duplicate_of"] for k, a in read_attributes(out).items()} == {"B": "A"}
    assert result["rejected_component_members"] == 1 and result["duplicate_documents"] == 1


@pytest.mark.parametrize("clean", [True, False])
def test_requested_documents_are_read_up_to_the_last_one_only(tmp_path, clean):
    """The shingles stage reads a shard no further than its last requested document; when the
    minhash pass found every line a document, it parses the requested lines only (the garbage
    lines here would raise if they were parsed)."""
    from steps.dedup.fuzzy import _Plan, _wanted_documents
    from steps.documents import DocumentShard

    lines = [b'{"id": "a", "text": "x"}', b"not json" if clean else b'{"id": "b", "text": "y"}',
             b'{"id": "c", "text": "z"}', b"not json either"]
    (tmp_path / "p.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    plan = _Plan(str(tmp_path / "work"), [DocumentShard(str(tmp_path / "p.jsonl"))], 1,
                 FuzzyDedupConfig("in", "out"), text_bytes=[3] if clean else [None])
    found = list(_wanted_documents(plan, 0, {0: [0], 2: [0]}))
    assert [(i, d["id"]) for i, d in found] == [(0, "a"), (2, "c")]


def test_untouched_documents_are_copied_byte_for_byte(tmp_path):
    """Kept JSONL lines come out as they went in (field order, spacing, escapes, extra fields);
    the text bytes out still count the kept texts."""
    import json

    from steps.documents import open_binary_lines, read_documents

    words = " ".join(f"w{i}" for i in range(120))
    docs = [{"id": f"d{i}", "text": f"Caf\u00e9 \u6771\u4eac page {i} " + " ".join(f"u{i}x{j}" for j in range(40)),
             "lang": "fr", "score": i / 3} for i in range(20)]
    docs[5]["text"], docs[12]["text"] = words, words + " tail"   # d12 is a near copy of d5
    lines = [json.dumps(d).encode() + b"\n" for d in docs]       # Python's layout, not ours
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p.jsonl").write_bytes(b"".join(lines))
    out = str(tmp_path / "out")
    result = fuzzy_dedup(FuzzyDedupConfig(str(tmp_path / "in"), out))
    with open_binary_lines(f"{out}/docs/p.jsonl.zst") as f:
        assert f.read() == b"".join(line for i, line in enumerate(lines) if i != 12)
    kept_texts = [d["text"] for d in read_documents(f"{out}/docs/p.jsonl.zst")]
    assert result["text_bytes_out"] == sum(len(t.encode()) for t in kept_texts)
    assert result["documents_out"] == 19


def test_unique_pairs_are_numpys_unique_rows():
    """fuzzy.unique_pairs (a 1-d sort of one key per row) gives `np.unique(pairs, axis=0)`: the same
    sorted rows, with 32-bit-wide columns, wider ones, and none."""
    from steps.dedup.fuzzy import unique_pairs

    rng = np.random.default_rng(5)
    for high in (50, 1 << 31, (1 << 32) - 1, 1 << 40):
        pairs = rng.integers(0, high, (5000, 2), dtype=np.int64)
        pairs = np.concatenate([pairs, pairs[::3], [[high - 1, 0], [0, high - 1]]])
        assert np.array_equal(unique_pairs(pairs), np.unique(pairs, axis=0))
    assert unique_pairs(np.zeros((0, 2), np.int64)).shape == (0, 2)


def test_jaccard_is_the_exact_jaccard_of_the_two_sets():
    """minhash.jaccard (each value of the smaller set looked up in the larger) equals |A & B| / |A | B|
    of Python sets: empty sets, disjoint ones, one inside the other, values past the other's ends."""
    rng = np.random.default_rng(9)
    cases = [([], []), ([], [5]), ([1, 2, 3], [4, 5]), ([1, 2, 3], [0, 2, 9]), ([7], [1, 2, 3, 7]),
             ([2 ** 64 - 1], [0, 2 ** 64 - 1]), ([0, 1], [2 ** 63, 2 ** 64 - 1])]
    for _ in range(200):
        base = rng.integers(0, 2 ** 64 - 1, int(rng.integers(0, 60)), dtype=np.uint64, endpoint=True)
        cases.append((base[:int(rng.integers(0, len(base) + 1))].tolist(),
                      np.concatenate([base[len(base) // 3:], rng.integers(0, 2 ** 40, 5, dtype=np.uint64)]).tolist()))
    for a, b in cases:
        sa, sb = set(a), set(b)
        want = 1.0 if not sa | sb else len(sa & sb) / len(sa | sb)
        arrays = [np.array(sorted(s), np.uint64) for s in (sa, sb)]
        assert jaccard(*arrays) == want and jaccard(*arrays[::-1]) == want, (a, b)
