"""The synthetic corpus: seeded, ground truth consistent with the texts, sized on request."""

from __future__ import annotations

import numpy as np

from steps.data.synthetic import corpus_of_size, generate_corpus
from steps.dedup.minhash import jaccard, shingle_hashes
from steps.documents import list_document_files, read_documents


def test_same_seed_same_corpus_other_seed_other_corpus():
    a, b, c = (generate_corpus(seed=s, num_originals=100) for s in (1, 1, 2))
    assert a.docs == b.docs and a.near_copies == b.near_copies
    assert a.docs != c.docs


def test_ground_truth_matches_the_texts():
    corpus = generate_corpus(seed=5, num_originals=400, exact_fraction=0.05, near_fraction=0.05)
    text = {d["id"]: d["text"] for d in corpus.docs}
    position = {d["id"]: i for i, d in enumerate(corpus.docs)}
    assert len(text) == len(corpus.docs)  # ids are unique
    assert len(corpus.exact_copies) == 20 and len(corpus.near_copies) == 20
    for copy, original in corpus.exact_copies.items():
        assert text[copy] == text[original] and position[original] < position[copy]
    shingles = lambda doc_id: np.unique(shingle_hashes(text[doc_id], 5))  # noqa: E731
    for copy, original in corpus.near_copies.items():
        assert text[copy] != text[original] and position[original] < position[copy]
        assert 0.8 <= jaccard(shingles(copy), shingles(original)) < 1
    for family in corpus.boilerplate_families:
        assert len(family) == 10
        similarities = [jaccard(shingles(family[0]), shingles(p)) for p in family[1:]]
        assert max(similarities) < 0.8 and min(similarities) > 0.3  # shared boilerplate, distinct bodies
    # no accidental duplicates among the rest
    duplicated = set(corpus.exact_copies) | set(corpus.near_copies)
    assert len({text[i] for i in text if i not in duplicated}) == len(text) - len(duplicated)


def test_written_shards_keep_corpus_order(tmp_path):
    corpus = generate_corpus(seed=2, num_originals=50)
    paths = corpus.write(str(tmp_path / "c"), num_shards=3)
    assert list_document_files(str(tmp_path / "c")) == paths
    assert [d for p in paths for d in read_documents(p)] == corpus.docs


def test_corpus_of_size_is_close_to_the_target():
    corpus = corpus_of_size(1.0, seed=0)
    assert 0.8e6 < corpus.num_bytes < 1.25e6
