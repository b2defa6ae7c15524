"""Exact dedup throughput: ours vs datatrove's exact-dedup pipeline on the same generated corpus.

    uv run --extra bench python scripts/bench/bench_exact_dedup.py [--size-mb 35] [--shards 8] [--workers 1]

Both run single-process (datatrove: LocalPipelineExecutor workers=1; ours: in-process map_shards, whose
reader decompresses the next block and whose writer compresses the last one in a second thread, so ours
may keep two cores busy: compare the CPU seconds printed too), or with `--workers N` on N cores (datatrove: N workers; ours: an embedded Ray cluster of N CPUs),
read the same .jsonl.zst shards and write kept documents compressed. datatrove runs twice: as
installed (its writer compresses at zstd level 10, through fsspec) and at our level 3. datatrove
keeps the duplicate with the highest `document_priority`; it is set to favour the earlier document,
which is our rule (first occurrence in corpus order), so the kept sets must be identical.
"""

from __future__ import annotations

import shutil
import tempfile

from data_bench_common import (DATATROVE_SETTINGS, add_workers_flag, bench_corpus, corpus_parser,
                               datatrove_zstd_level, read_ids, report, report_cpu, start_ray_for_ours, timed,
                               warm_imports)


def run_ours(input_dir: str, out: str) -> None:
    from steps.dedup import ExactDedupConfig, exact_dedup

    result = exact_dedup(ExactDedupConfig(input_dir, out))
    print(f"  ours: {result['documents_in']} docs in, {result['duplicate_documents']} duplicates")


def run_datatrove(input_dir: str, work: str, tasks: int, workers: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.exact_dedup import (ExactDedupConfig, ExactDedupFilter, ExactDedupSignature,
                                                      ExactFindDedups)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    def text_of(doc) -> str:
        return doc.text

    def earlier_first(doc) -> int:  # ids are doc-<position in corpus order>; priority in [1, 65535]
        return 65535 - int(doc.id.split("-")[1])

    config = ExactDedupConfig(content_getter=text_of, document_priority=earlier_first)
    stages = [
        [JsonlReader(input_dir, glob_pattern="*.jsonl.zst"), ExactDedupSignature(f"{work}/sigs", config=config)],
        [ExactFindDedups(f"{work}/sigs", f"{work}/dups", config=config)],
        [JsonlReader(input_dir, glob_pattern="*.jsonl.zst"), ExactDedupFilter(f"{work}/dups", config=config),
         JsonlWriter(f"{work}/out", compression="zstd")],
    ]
    for i, pipeline in enumerate(stages):
        LocalPipelineExecutor(pipeline, tasks=1 if i == 1 else tasks, workers=workers,
                              logging_dir=f"{work}/logs{i}").run()


def main() -> None:
    parser = corpus_parser(__doc__)
    add_workers_flag(parser)
    args = parser.parse_args()
    input_dir, truth = bench_corpus(args.size_mb, args.seed, args.shards)
    print(f"corpus: {truth['num_docs']} docs, {truth['num_bytes'] / 1e6:.1f} MB of text, {args.shards} shards, "
          f"{len(truth['exact_copies'])} injected exact copies")
    warm_imports("steps.dedup", "datatrove.executor", "datatrove.pipeline.dedup.exact_dedup",
                 "datatrove.pipeline.readers", "datatrove.pipeline.writers")
    start_ray_for_ours(args.workers)
    work = tempfile.mkdtemp(prefix="bench-exact-")
    times: dict[str, float] = {}
    try:
        with timed("ours", times):
            run_ours(input_dir, f"{work}/ours")
        for anchor, level in DATATROVE_SETTINGS.items():
            with datatrove_zstd_level(level), timed(anchor, times):
                run_datatrove(input_dir, f"{work}/{anchor}", args.shards, args.workers)
        ours_kept = read_ids(f"{work}/ours/docs")
        datatrove_kept = read_ids(f"{work}/datatrove/out")
        assert read_ids(f"{work}/datatrove-zstd3/out") == datatrove_kept
    finally:
        shutil.rmtree(work, ignore_errors=True)
    expected = truth["num_docs"] - len(truth["exact_copies"])
    print(f"  kept: ours {len(ours_kept)}, datatrove {len(datatrove_kept)}, expected {expected}; "
          f"same kept set: {set(ours_kept) == set(datatrove_kept)}; "
          f"ours removes exactly the injected copies: "
          f"{len(ours_kept) == expected and not set(truth['exact_copies']) & set(ours_kept)}")
    for anchor in DATATROVE_SETTINGS:
        report(f"exact dedup (docs/s), against {anchor}", times["ours"], times[anchor], anchor, truth["num_docs"],
               "docs", 6.0)
    report("exact dedup (MB/s)", times["ours"], times["datatrove"], "datatrove", truth["num_bytes"] / 1e6, "MB", 6.0)
    for anchor in DATATROVE_SETTINGS:
        report_cpu(times, anchor)


if __name__ == "__main__":
    main()
