"""Fuzzy dedup throughput and quality: ours in one process and on a Ray cluster vs datatrove's MinHash
pipeline at its best setting, on the same corpus, in one run.

    uv run --extra bench python scripts/bench/bench_fuzzy_dedup.py [--size-mb 35] [--shards 8] [--rounds 3]
        [--nodes 3]

Same parameters on both sides: 14 bands x 8 rows, word 5-grams. A cluster of `--nodes` one-CPU nodes
(ray.cluster_utils.Cluster) is started once, before any timing. Each round then runs, interleaved and
each in a fresh process whose imports are not timed: ours in one process (no Ray); datatrove (its 4
stages, LocalPipelineExecutor) with 1 and 2 workers, its writer at our zstd level 3, and with 2
workers as installed (fsspec's zstd level 10); ours on the cluster (a driver joined to it, as an
experiment's would be). A round's ratio is the fastest datatrove setting of that round over ours, so
the machine's load that round weighs on both sides; the table gives each round and the median.
The kept set's fingerprint (sha256 of the kept ids in order) must be the same in one process and on
the cluster. Quality is scored against the generator's ground truth. The kept sets are expected to
differ: datatrove removes every LSH match without checking it, so it drops pages that only share
boilerplate (DESIGN §7); ours verifies each match by exact Jaccard >= threshold (0.8).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from data_bench_common import (REPO, bench_corpus, corpus_parser, datatrove_word_tokenizer, datatrove_zstd_level,
                               read_ids)

BANDS, ROWS, NGRAM = 14, 8, 5
DATATROVE = {"datatrove 1 worker, zstd 3": (1, 3), "datatrove 2 workers, zstd 3": (2, 3),
             "datatrove 2 workers, as installed": (2, None)}
"""The anchor's settings timed each round: (workers, zstd level of its writer; None: fsspec's 10)."""


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


def child(argv: list[str]) -> None:
    """One timed run in this fresh process: `ours INPUT OUT [ADDRESS]` or `datatrove INPUT WORK TASKS
    WORKERS LEVEL`; prints RESULT and its seconds (imports and joining the cluster not timed)."""
    from executor.engine.runner.ray_env import prepare_loopback_environment

    prepare_loopback_environment()
    if argv[0] == "ours":
        import steps.dedup  # noqa: F401

        if len(argv) > 3:
            import ray

            ray.init(address=argv[3], log_to_driver=False)
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        result = run_ours(argv[1], argv[2])
    else:
        import datatrove.executor  # noqa: F401
        import datatrove.pipeline.dedup.minhash  # noqa: F401
        import datatrove.pipeline.readers  # noqa: F401
        import datatrove.pipeline.writers  # noqa: F401

        level = None if argv[5] == "None" else int(argv[5])
        with datatrove_zstd_level(level):
            start, cpu_start = time.perf_counter(), _cpu_seconds()
            run_datatrove(argv[1], argv[2], int(argv[3]), int(argv[4]))
        result = {}
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    print("RESULT " + json.dumps({"seconds": seconds, "cpu_seconds": cpu, **result}, default=str), flush=True)


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (datatrove's workers)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed_child(*args: object) -> dict:
    done = subprocess.run([sys.executable, __file__, "child", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0 or "RESULT " not in done.stdout:
        raise SystemExit(f"{args[0]} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.rsplit("RESULT ", 1)[1])


def fingerprint(directory: str) -> str:
    return hashlib.sha256("".join(i + "\n" for i in read_ids(directory)).encode()).hexdigest()[:16]


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


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def one_round(input_dir: str, work: str, shards: int, address: str, r: int) -> tuple[dict[str, float], dict]:
    """Every timed run of round r, interleaved; (seconds by label, what the runs left to check)."""
    seconds: dict[str, float] = {}
    found: dict = {}
    result = timed_child("ours", input_dir, f"{work}/ours-{r}")
    seconds["ours, in one process"] = result["seconds"]
    found["cpu"] = {"ours, in one process": result["cpu_seconds"]}
    found["fingerprint in one process"] = fingerprint(f"{work}/ours-{r}/docs")
    found["ours"] = result
    for label, (workers, level) in DATATROVE.items():
        anchor = timed_child("datatrove", input_dir, f"{work}/dt-{r}-{workers}-{level}", shards, workers, level)
        seconds[label] = anchor["seconds"]
        if workers == 1:  # the CPU of its pool's workers (not our children) is not counted
            found["cpu"][label] = anchor["cpu_seconds"]
    found["datatrove kept"] = read_ids(f"{work}/dt-{r}-2-3/out")
    if address:
        seconds["ours, on the cluster"] = timed_child("ours", input_dir, f"{work}/cluster-{r}", address)["seconds"]
        found["fingerprint on the cluster"] = fingerprint(f"{work}/cluster-{r}/docs")
    found["kept"] = read_ids(f"{work}/ours-{r}/docs")
    return seconds, found


def print_table(rounds: list[dict[str, float]], cpu: list[dict[str, float]], docs: int, nodes: int,
                target: float) -> None:
    print(f"\nfuzzy dedup, seconds per round (ratio: the round's fastest datatrove setting / ours; target >= "
          f"{target}x in one process)")
    width = max(map(len, rounds[0]))
    for label in rounds[0]:
        print(f"  {label:{width}s}  " + "  ".join(f"{r[label]:7.2f}" for r in rounds))
    ratios = {}
    for ours, name in (("ours, in one process", "in one process"), ("ours, on the cluster", f"on {nodes} nodes")):
        if ours not in rounds[0]:
            continue
        per_round = [min(r[k] for k in DATATROVE) / r[ours] for r in rounds]
        ratios[name] = statistics.median(per_round)
        print(f"  ratio {name:{width - 6}s}  " + "  ".join(f"{x:6.2f}x" for x in per_round)
              + f"   median {ratios[name]:.2f}x, {docs / statistics.median(r[ours] for r in rounds):,.0f} docs/s")
    ours, anchor = (statistics.median(c[k] for c in cpu) for k in cpu[0])
    print(f"  CPU seconds, median (less sensitive to the machine's load): ours in one process {ours:.2f}, "
          f"{list(cpu[0])[1]} {anchor:.2f}: {anchor / ours:.2f}x")
    met = ratios["in one process"] >= target
    print(f"  in one process: {ratios['in one process']:.2f}x (target >= {target}x: {'MET' if met else 'NOT MET'})"
          + (f"; on {nodes} nodes: {ratios[f'on {nodes} nodes']:.2f}x" if nodes else ""))


def main() -> None:
    parser = corpus_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3, help="0: no cluster (ours in one process only)")
    args = parser.parse_args()
    input_dir, truth = bench_corpus(args.size_mb, args.seed, args.shards)
    print(f"corpus: {truth['num_docs']} docs, {truth['num_bytes'] / 1e6:.1f} MB of text, {args.shards} shards; "
          f"injected {len(truth['exact_copies'])} exact + {len(truth['near_copies'])} near copies, "
          f"{sum(map(len, truth['boilerplate_families']))} boilerplate-sharing pages")
    print("load before:", load(), flush=True)
    from executor.engine.runner.ray_env import prepare_loopback_environment

    prepare_loopback_environment()
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")  # a loaded machine starts agents slowly
    os.environ["PYTHONPATH"] = f"{REPO}:{os.environ.get('PYTHONPATH', '')}"
    sys.path.insert(0, str(REPO))
    import ray
    from tests.steps.cluster_driver import start_cluster  # the tests' cluster helper

    cluster = start_cluster(args.nodes)[0] if args.nodes else None
    ray.shutdown()  # this process only keeps the cluster up; each timed run joins it from its own process
    work = tempfile.mkdtemp(prefix="bench-fuzzy-")
    rounds, cpu = [], []
    try:
        for r in range(args.rounds):
            seconds, found = one_round(input_dir, work, args.shards, cluster.address if cluster else "", r)
            rounds.append(seconds)
            cpu.append(found["cpu"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()), flush=True)
            for name in ("in one process", "on the cluster"):
                print(f"  kept-set fingerprint {name}: {found.get(f'fingerprint {name}', '-')}")
            if cluster and found["fingerprint in one process"] != found["fingerprint on the cluster"]:
                raise SystemExit("the kept set on the cluster differs from the one in one process")
            for directory in os.listdir(work):
                shutil.rmtree(f"{work}/{directory}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if cluster:
            cluster.shutdown()
    ours = found["ours"]
    print(f"  ours: {ours['candidate_pairs']} LSH candidate pairs, {ours['verified_pairs']} verified, "
          f"{ours['rejected_pairs']} rejected by exact Jaccard")
    print("\nquality against ground truth:")
    all_ids = read_ids(input_dir)
    ours_removed = score("ours", found["kept"], truth, all_ids)
    datatrove_removed = score("datatrove", found["datatrove kept"], truth, all_ids)
    boilerplate = {p for family in truth["boilerplate_families"] for p in family}
    only_datatrove = datatrove_removed - ours_removed
    print(f"\nkept-set difference: {len(only_datatrove)} removed only by datatrove "
          f"({len(only_datatrove & boilerplate)} of them boilerplate-sharing pages), "
          f"{len(ours_removed - datatrove_removed)} removed only by ours")
    print_table(rounds, cpu, truth["num_docs"], args.nodes, 5.0)  # issue 50: >= 5x datatrove
    print("load after:", load())


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2:])
    else:
        main()
