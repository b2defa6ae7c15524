"""Shared pieces of the data-step benchmarks: the generated corpus, timing, datatrove's word tokenizer.

The corpus is generated once per (size, seed, shards) under scratch/bench/ and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from steps.data.synthetic import SyntheticCorpus, corpus_of_size  # noqa: E402

SCRATCH = REPO / "scratch" / "bench"


def bench_corpus(size_mb: float, seed: int, shards: int) -> tuple[str, dict]:
    """(directory of .jsonl.zst shards, ground truth) of a generated corpus; built once, then reused."""
    directory = SCRATCH / f"corpus-{size_mb:g}mb-seed{seed}-{shards}shards"
    truth_path = directory / "truth.json"
    if not truth_path.exists():
        corpus: SyntheticCorpus = corpus_of_size(size_mb, seed=seed)
        corpus.write(str(directory / "docs"), num_shards=shards)
        truth_path.write_text(json.dumps({
            "exact_copies": corpus.exact_copies, "near_copies": corpus.near_copies,
            "boilerplate_families": corpus.boilerplate_families, "num_docs": len(corpus.docs),
            "num_bytes": corpus.num_bytes}))
    return str(directory / "docs"), json.loads(truth_path.read_text())


def corpus_parser(doc: str | None) -> argparse.ArgumentParser:
    """The flags every data benchmark takes: corpus size, shard count and seed."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=35)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    return parser


@contextmanager
def timed(label: str, into: dict):
    start = time.perf_counter()
    yield
    into[label] = time.perf_counter() - start
    print(f"  {label}: {into[label]:.2f} s", flush=True)


def warm_imports() -> None:
    """Import what our steps import lazily (ray, via map_shards) so that it is not timed."""
    from executor.engine.runner.ray_env import prepare_loopback_environment

    prepare_loopback_environment()  # before `import ray`, which reads some of these settings once
    import ray  # noqa: F401


def datatrove_word_tokenizer():
    """A whitespace/punctuation word tokenizer for datatrove, which otherwise downloads NLTK data."""
    import re

    from datatrove.utils.word_tokenizers import WordTokenizer

    word = re.compile(r"\w+")

    class RegexWordTokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return word.findall(text)

        def sent_tokenize(self, text: str) -> list[str]:
            return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [m.span() for m in word.finditer(text)]

    return RegexWordTokenizer("en")


def read_ids(directory: str, pattern: str = "*") -> list[str]:
    """Ids of every JSONL(.gz/.zst) document under `directory` (datatrove or our outputs)."""
    from steps.documents import read_documents

    paths = sorted(p for p in Path(directory).rglob(pattern) if p.is_file() and ".jsonl" in p.name)
    return [d["id"] for p in paths for d in read_documents(str(p))]


def report(title: str, ours_s: float, anchor_s: float, anchor: str, unit_amount: float, unit: str,
           target: float) -> None:
    ours_rate, anchor_rate = unit_amount / ours_s, unit_amount / anchor_s
    ratio = ours_rate / anchor_rate
    print(f"\n{title}")
    print(f"  ours    : {ours_s:7.2f} s  {ours_rate:12,.1f} {unit}/s")
    print(f"  {anchor:8s}: {anchor_s:7.2f} s  {anchor_rate:12,.1f} {unit}/s")
    print(f"  ratio ours/{anchor}: {ratio:.2f}x  (target >= {target}x: {'MET' if ratio >= target else 'NOT MET'})")
