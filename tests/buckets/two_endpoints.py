"""An experiment whose input lives on one S3-compatible endpoint and whose prefix on another (the
R2-plus-AWS, MinIO-plus-CoreWeave setup): run with `--prefix s3://runs/... --storage-options` an
object keyed by location, one entry per endpoint with its own keys.

    python tests/buckets/two_endpoints.py --source s3://corpus/in --prefix s3://runs/team \\
        --storage-options '{"s3://corpus": {...}, "s3://runs": {...}}'

The count step reads the input's shards in map_shards tasks (Ray tasks on the Ray runner) and
writes its result under its own output path; the report step reads that back from the prefix.
"""

import json
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, map_shards, open_file, output_path_of, this_output_path


def count_words_in(path: str) -> int:
    """One shard: opened with the storage options of the step that fanned out."""
    with open_file(path, "r") as f:
        return len(f.read().split())


@dataclass(frozen=True)
class CountConfig:
    source: str  # a folder on the input endpoint holding shard-*.txt (a plain string: a fixed input)
    shards: int
    output_path: str


def count_words(config: CountConfig) -> dict:
    counts = map_shards(count_words_in, [f"{config.source}/shard-{i}.txt" for i in range(config.shards)])
    with open_file(f"{config.output_path}/counts.json", "w") as f:
        json.dump(counts, f)
    return {"words": sum(counts)}


@dataclass(frozen=True)
class ReportConfig:
    counts_path: str
    output_path: str


def report(config: ReportConfig) -> dict:
    with open_file(config.counts_path, "r") as f:
        counts = json.load(f)
    with open_file(f"{config.output_path}/report.txt", "w") as f:
        f.write(f"{sum(counts)} words in {len(counts)} shards\n")
    return {"shards": len(counts)}


@dataclass(frozen=True)
class TwoEndpointsOptions:
    source: str = "s3://corpus/in"
    shards: int = 3


def build(options: TwoEndpointsOptions) -> list[ExecutorStep]:
    count = ExecutorStep("two/count", count_words, CountConfig(options.source, options.shards, this_output_path()))
    return [ExecutorStep("two/report", report, ReportConfig(output_path_of(count, "counts.json"), this_output_path()))]


if __name__ == "__main__":
    executor_main(build, "input on one endpoint, prefix on another", config=TwoEndpointsOptions())
