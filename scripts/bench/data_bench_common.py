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


def cpu_seconds() -> float:
    """CPU seconds used so far by this process (all threads) and its ended, reaped children (datasets'
    and datatrove's worker processes): on a shared machine the fair figure beside the wall time."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextmanager
def timed(label: str, into: dict):
    start, cpu = time.perf_counter(), cpu_seconds()
    yield
    into[label] = time.perf_counter() - start
    into[f"{label} cpu"] = cpu_seconds() - cpu
    print(f"  {label}: {into[label]:.2f} s ({into[f'{label} cpu']:.2f} s CPU)", flush=True)


def add_workers_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="N > 1: ours runs its tasks on an embedded local Ray cluster of N CPUs (an "
                             "experiment's default runner; started before the timing) and datatrove with N "
                             "workers; 1: both in one process")


def start_ray_for_ours(cpus: int) -> None:
    """An embedded Ray cluster of `cpus` CPUs, started before any timing (0 or 1: none, in-process)."""
    if cpus > 1:
        from executor.engine.runner import ray_env

        ray_env.prepare_loopback_environment()
        ray_env.start_embedded(cpus, None, None)
        print(f"ours runs its tasks on a local Ray cluster of {cpus} CPUs")


def warm_imports(*modules: str) -> None:
    """Import what our steps import lazily (ray, via map_shards), and `modules` (the steps and the
    anchor's pipeline), so that no side's imports are timed."""
    import importlib

    from executor.engine.runner.ray_env import prepare_loopback_environment

    prepare_loopback_environment()  # before `import ray`, which reads some of these settings once
    import ray  # noqa: F401

    for module in modules:
        importlib.import_module(module)


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


@contextmanager
def datatrove_zstd_level(level: int | None):
    """datatrove's JsonlWriter(compression="zstd") compresses through fsspec, which (without the
    `backports.zstd` package) uses zstandard at level 10; ours writes level 3. With `level`, fsspec's
    zstd writer uses that level inside the block, so both sides do the same compression work."""
    if level is None:
        yield
        return
    import fsspec.compression
    import zstandard

    installed = fsspec.compression.compr["zstd"]

    def zstd_file(infile, mode="rb"):
        if "r" in mode:
            return zstandard.ZstdDecompressor().stream_reader(infile)
        return zstandard.ZstdCompressor(level=level).stream_writer(infile)

    fsspec.compression.register_compression("zstd", zstd_file, "zst", force=True)
    try:
        yield
    finally:
        fsspec.compression.register_compression("zstd", installed, "zst", force=True)


DATATROVE_SETTINGS = {"datatrove": None, "datatrove-zstd3": 3}
"""The anchor as installed (its writer compresses at fsspec's zstd level 10), and at our level 3."""


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


def report_cpu(times: dict, anchor: str) -> None:
    """The CPU seconds of ours and of the anchor (processes included), and their ratio: on a loaded
    machine wall times mostly measure waiting for a core; this does not (a parallel anchor's CPU is
    the sum over its processes, so this is not the wall-time ratio of a quiet machine)."""
    ours, theirs = times["ours cpu"], times[f"{anchor} cpu"]
    print(f"  CPU seconds: ours {ours:.2f}, {anchor} {theirs:.2f}; ratio {theirs / ours:.2f}x")
