"""Marin's tutorial `experiments/tutorials/hello_world.py`, rewritten for stepgraph.

Two steps: write the numbers 0..n-1, then compute their sum, min and max. What changed from the
Marin file, line by line (docs/marin.md, "Coming from Marin", has the full table):

- imports come from `executor` instead of `marin.execution.executor`; the names are the same
  (`ExecutorStep`, `executor_main`, `output_path_of`, `this_output_path`);
- files are opened with `executor.open_file` (the run's storage options applied)
  instead of `open_url`;
- nothing is marked `versioned(...)`: the whole config is hashed (`n` is part of the id here
  because it is a config field; mark a field `execution_only(...)` to leave it out);
- `compute_stats` also returns its stats as a dataclass: stored in the step's record as JSON
  fields and read back with `executor.load_result(stats)` (Marin's artifact pattern).

    uv run python experiments/marin_hello_world.py             # run (again: nothing to do)
    uv run python experiments/marin_hello_world.py --dry-run   # Marin's --dry_run true works too
"""

import json
import os
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, open_file, output_path_of, this_output_path


@dataclass(frozen=True)
class GenerateDataConfig:
    n: int
    """Number of data points to generate."""

    output_path: str
    """Where to write the numbers."""


def generate_data(config: GenerateDataConfig) -> None:
    """Generate numbers from 0 to `n` - 1 and write them to `output_path`."""
    numbers = list(range(config.n))
    with open_file(os.path.join(config.output_path, "numbers.json"), "w") as f:
        json.dump(numbers, f)


@dataclass(frozen=True)
class ComputeStatsConfig:
    input_path: str
    """Path to the directory with numbers."""

    output_path: str
    """Where to write the stats."""


@dataclass(frozen=True)
class Stats:
    sum: int
    min: int
    max: int


def compute_stats(config: ComputeStatsConfig) -> Stats:
    """Compute the sum, min and max of the numbers and write them to `output_path`."""
    with open_file(os.path.join(config.input_path, "numbers.json")) as f:
        numbers = json.load(f)
    stats = Stats(sum=sum(numbers), min=min(numbers), max=max(numbers))
    with open_file(os.path.join(config.output_path, "stats.json"), "w") as f:
        json.dump({"sum": stats.sum, "min": stats.min, "max": stats.max}, f)
    return stats


n = 100

data = ExecutorStep(
    name="hello_world/data",
    description=f"Generate data from 0 to {n}-1.",
    fn=generate_data,
    config=GenerateDataConfig(
        n=n,
        output_path=this_output_path(),
    ),
)

stats = ExecutorStep(
    name="hello_world/stats",
    description="Compute stats of the generated data.",
    fn=compute_stats,
    config=ComputeStatsConfig(
        input_path=output_path_of(data),
        output_path=this_output_path(),
    ),
)

if __name__ == "__main__":
    executor_main(
        steps=[data, stats],
        description="Simple experiment to compute stats of some numbers.",
    )
