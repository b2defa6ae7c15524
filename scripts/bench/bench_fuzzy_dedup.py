"""Fuzzy dedup throughput and quality: ours vs datatrove's MinHash pipeline on the same corpus.

    uv run --extra bench python scripts/bench/bench_fuzzy_dedup.py [--size-mb 35] [--shards 8] [--workers 1]

Same parameters on both sides: 14 bands x 8 rows, word 5-grams. Both run single-process
(datatrove: LocalPipelineExecutor workers=1, its 4 stages; ours: in-process map_shards), or with
`--workers N` on N cores (datatrove: N workers; ours: an embedded Ray cluster of N CPUs).
datatrove runs twice: as installed (its writer compresses at zstd level 10) and at our level 3.
Quality is scored against the generator's ground truth. The kept sets are expected to differ:
datatrove removes every LSH match without checking it, so it drops pages that only share
boilerplate (DESIGN §7); ours verifies each match by exact Jaccard >= threshold (0.8).
"""

from __future__ import annotations

import shutil
import tempfile

from data_bench_common import (DATATROVE_SETTINGS, add_workers_flag, bench_corpus, corpus_parser,
                               datatrove_word_tokenizer, datatrove_zstd_level, read_ids, report, start_ray_for_ours,
                               timed, warm_imports)

BANDS, ROWS, NGRAM = 14, 8, 5


def run_ours(input_dir: str, out: str) -> dict:
    from steps.dedup import FuzzyDedupConfig, fuzzy_dedup

    return fuzzy_dedup(FuzzyDedupConfig(input_dir, out, threshold=0.8, num_bands=BANDS, rows_per_band=ROWS,
                                        ngram=NGRAM))


def run_datatrove(input_dir: str, work: str, tasks: int, workers: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    config = MinhashConfig(n_grams=NGRAM, num_buckets=BANDS, hashes_per_bucket=ROWS)
    stages = [
        ([JsonlReader(input_dir, glob_pattern="*.jsonl.zst"),
          MinhashDedupSignature(f"{work}/sigs", config=config, language=datatrove_word_tokenizer())], tasks),
        ([MinhashDedupBuckets(f"{work}/sigs", f"{work}/buckets", config=config)], BANDS),
        ([MinhashDedupCluster(f"{work}/buckets", f"{work}/remove", config=config)], 1),
        ([JsonlReader(input_dir, glob_pattern="*.jsonl.zst"), MinhashDedupFilter(f"{work}/remove"),
          JsonlWriter(f"{work}/out", compression="zstd")], tasks),
    ]
    for i, (pipeline, n) in enumerate(stages):
        LocalPipelineExecutor(pipeline, tasks=n, workers=workers, logging_dir=f"{work}/logs{i}").run()


def score(name: str, kept: list[str], truth: dict, all_ids: list[str]) -> set[str]:
    removed = set(all_ids) - set(kept)
    duplicates = set(truth["exact_copies"]) | set(truth["near_copies"])
    boilerplate = {p for family in truth["boilerplate_families"] for p in family}
    wrong = removed - duplicates
    print(f"  {name:9s}: removed {len(removed):5d} | exact copies found {len(removed & set(truth['exact_copies']))}"
          f"/{len(truth['exact_copies'])} | near copies found {len(removed & set(truth['near_copies']))}"
          f"/{len(truth['near_copies'])} | wrongly removed {len(wrong)} (of which boilerplate pages "
          f"{len(wrong & boilerplate)}/{len(boilerplate)}) | precision {1 - len(wrong) / max(1, len(removed)):.4f}")
    return removed


def main() -> None:
    parser = corpus_parser(__doc__)
    add_workers_flag(parser)
    args = parser.parse_args()
    input_dir, truth = bench_corpus(args.size_mb, args.seed, args.shards)
    print(f"corpus: {truth['num_docs']} docs, {truth['num_bytes'] / 1e6:.1f} MB of text, {args.shards} shards; "
          f"injected {len(truth['exact_copies'])} exact + {len(truth['near_copies'])} near copies, "
          f"{sum(map(len, truth['boilerplate_families']))} boilerplate-sharing pages")
    warm_imports("steps.dedup", "datatrove.executor", "datatrove.pipeline.dedup.minhash",
                 "datatrove.pipeline.readers", "datatrove.pipeline.writers")
    start_ray_for_ours(args.workers)
    all_ids = read_ids(input_dir)
    work = tempfile.mkdtemp(prefix="bench-fuzzy-")
    times: dict[str, float] = {}
    try:
        with timed("ours", times):
            result = run_ours(input_dir, f"{work}/ours")
        print(f"  ours: {result['candidate_pairs']} LSH candidate pairs, {result['verified_pairs']} verified, "
              f"{result['rejected_pairs']} rejected by exact Jaccard")
        for anchor, level in DATATROVE_SETTINGS.items():
            with datatrove_zstd_level(level), timed(anchor, times):
                run_datatrove(input_dir, f"{work}/{anchor}", args.shards, args.workers)
        ours_kept = read_ids(f"{work}/ours/docs")
        datatrove_kept = read_ids(f"{work}/datatrove/out")
        assert read_ids(f"{work}/datatrove-zstd3/out") == datatrove_kept
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nquality against ground truth:")
    ours_removed = score("ours", ours_kept, truth, all_ids)
    datatrove_removed = score("datatrove", datatrove_kept, truth, all_ids)
    boilerplate = {p for family in truth["boilerplate_families"] for p in family}
    only_datatrove = datatrove_removed - ours_removed
    only_ours = ours_removed - datatrove_removed
    print(f"\nkept-set difference: {len(only_datatrove)} removed only by datatrove "
          f"({len(only_datatrove & boilerplate)} of them boilerplate-sharing pages), "
          f"{len(only_ours)} removed only by ours")
    for anchor in DATATROVE_SETTINGS:
        report(f"fuzzy dedup (docs/s), against {anchor}", times["ours"], times[anchor], anchor, truth["num_docs"],
               "docs", 3.0)


if __name__ == "__main__":
    main()
