"""A seeded synthetic corpus with known duplicates, for dedup tests and benchmarks.

Documents are made of pseudo-words drawn from a Zipf-like vocabulary, so unrelated documents
share almost no word 5-grams. Injected into the corpus, each recorded in the ground truth:

- exact copies: the same text as an earlier original, under a new id;
- near copies: an earlier original with about 1% of its words replaced and a line appended
  (word 5-gram Jaccard with the original around 0.85-0.95);
- boilerplate families: pages of one "site" sharing a long header and footer with different
  bodies (Jaccard between pages around 0.45-0.7). They are NOT duplicates: a dedup that removes them loses data.

Every copy comes after its original in the corpus order, so "first occurrence" is the original.
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.data.synthetic", DATA)

from dataclasses import dataclass, field

import numpy as np

from steps.documents import write_documents

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "da", "zu", "qui", "an", "el",
              "or", "is", "um", "fa", "ge", "ho", "ji", "ly", "mo", "ni", "pe", "ra", "so", "tu",
              "wa", "xe", "yo", "br", "st", "tr", "ch", "th", "ng", "ok", "ip", "ex"]


@dataclass
class SyntheticCorpus:
    """The documents in corpus order plus the ground truth of what was injected."""

    docs: list[dict]
    exact_copies: dict[str, str] = field(default_factory=dict)   # copy id -> original id
    near_copies: dict[str, str] = field(default_factory=dict)    # copy id -> original id
    boilerplate_families: list[list[str]] = field(default_factory=list)

    @property
    def num_bytes(self) -> int:
        return sum(len(d["text"].encode("utf-8")) for d in self.docs)

    def write(self, directory: str, num_shards: int = 1) -> list[str]:
        """Write the corpus as `num_shards` contiguous .jsonl.zst shards (corpus order kept)."""
        bounds = np.linspace(0, len(self.docs), num_shards + 1).astype(int)
        paths = []
        for i in range(num_shards):
            path = f"{directory.rstrip('/')}/part-{i:05d}.jsonl.zst"
            write_documents(path, self.docs[bounds[i]:bounds[i + 1]])
            paths.append(path)
        return paths


class _TextMaker:
    def __init__(self, rng: np.random.Generator, vocab_size: int = 20000):
        self.rng = rng
        lengths = rng.integers(1, 4, size=vocab_size)
        syllables = rng.integers(0, len(_SYLLABLES), size=(vocab_size, 3))
        words = {"".join(_SYLLABLES[s] for s in syllables[i, :lengths[i]]) for i in range(vocab_size)}
        self.vocab = rng.permutation(np.array(sorted(words)))
        ranks = np.arange(1, len(self.vocab) + 1)
        p = 1.0 / ranks ** 0.9
        self.p = p / p.sum()

    def words(self, n: int) -> list[str]:
        return list(self.vocab[self.rng.choice(len(self.vocab), size=n, p=self.p)])

    def text(self, n_words: int) -> str:
        """Sentences of 8-20 words, grouped into paragraphs of 3-6 sentences."""
        words = self.words(n_words)
        paragraphs, sentence, sentences = [], [], []
        sentence_len = int(self.rng.integers(8, 21))
        paragraph_len = int(self.rng.integers(3, 7))
        for w in words:
            sentence.append(w)
            if len(sentence) >= sentence_len:
                sentences.append(" ".join(sentence).capitalize() + ".")
                sentence, sentence_len = [], int(self.rng.integers(8, 21))
                if len(sentences) >= paragraph_len:
                    paragraphs.append(" ".join(sentences))
                    sentences, paragraph_len = [], int(self.rng.integers(3, 7))
        if sentence:
            sentences.append(" ".join(sentence).capitalize() + ".")
        if sentences:
            paragraphs.append(" ".join(sentences))
        return "\n\n".join(paragraphs)

    def near_copy(self, text: str, substitution_rate: float = 0.01) -> str:
        words = text.split(" ")
        n = max(1, int(len(words) * substitution_rate))
        for i in self.rng.choice(len(words), size=n, replace=False):
            words[i] = str(self.vocab[self.rng.integers(0, len(self.vocab))])
        return " ".join(words) + "\n\n" + self.text(int(self.rng.integers(4, 9)))


def generate_corpus(seed: int = 0, num_originals: int = 1000, mean_words: int = 300,
                    exact_fraction: float = 0.05, near_fraction: float = 0.05,
                    boilerplate_sites: int = 10, pages_per_site: int = 10) -> SyntheticCorpus:
    """A corpus of `num_originals` unique documents plus injected copies and boilerplate pages.

    About 1,000 originals of 300 words make ~2.4 MB; `corpus_of_size` picks counts for a target size.
    """
    rng = np.random.default_rng(seed)
    maker = _TextMaker(rng)
    lengths = np.maximum(20, rng.normal(mean_words, mean_words / 3, size=num_originals).astype(int))
    originals = [maker.text(int(n)) for n in lengths]

    # (sort key, text, kind, index of original) -- copies get keys after their original's
    keys = rng.random(num_originals)
    entries: list[tuple[float, str, str, int]] = [(keys[i], t, "original", i) for i, t in enumerate(originals)]
    chosen = rng.permutation(num_originals)
    n_exact, n_near = int(num_originals * exact_fraction), int(num_originals * near_fraction)
    for i in chosen[:n_exact]:
        entries.append((keys[i] + (1 - keys[i]) * rng.random() + 1e-12, originals[i], "exact", int(i)))
    for i in chosen[n_exact:n_exact + n_near]:
        entries.append((keys[i] + (1 - keys[i]) * rng.random() + 1e-12, maker.near_copy(originals[i]), "near", int(i)))
    for site in range(boilerplate_sites):
        header = f"Site {site} home news about contact\n\n" + maker.text(int(rng.integers(120, 160)))
        footer = maker.text(int(rng.integers(100, 140))) + f"\n\nCopyright site {site}. All rights reserved."
        for _ in range(pages_per_site):
            body = maker.text(int(rng.integers(60, 140)))
            entries.append((rng.random(), f"{header}\n\n{body}\n\n{footer}", f"site{site}", -1))

    entries.sort(key=lambda e: e[0])
    corpus = SyntheticCorpus(docs=[])
    original_ids: dict[int, str] = {}
    families: dict[str, list[str]] = {}
    width = len(str(len(entries)))
    for position, (_, text, kind, original) in enumerate(entries):
        doc_id = f"doc-{position:0{width}d}"
        corpus.docs.append({"id": doc_id, "text": text})
        if kind == "original":
            original_ids[original] = doc_id
        elif kind.startswith("site"):
            families.setdefault(kind, []).append(doc_id)
    for position, (_, _, kind, original) in enumerate(entries):
        if kind in ("exact", "near"):
            target = corpus.exact_copies if kind == "exact" else corpus.near_copies
            target[f"doc-{position:0{width}d}"] = original_ids[original]
    corpus.boilerplate_families = [families[k] for k in sorted(families)]
    return corpus


def corpus_of_size(target_mb: float, seed: int = 0) -> SyntheticCorpus:
    """A corpus of roughly `target_mb` megabytes of text (e.g. 35 for the benchmarks)."""
    bytes_per_original = 2.15e3  # 300 words on average, measured
    num_originals = max(100, int(target_mb * 1e6 / bytes_per_original / 1.1))
    sites = max(2, num_originals // 200)
    return generate_corpus(seed=seed, num_originals=num_originals, boilerplate_sites=sites,
                           pages_per_site=20)
