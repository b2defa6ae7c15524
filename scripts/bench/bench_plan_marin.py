"""Whole-process planning cost on the deep 10,000-step DAG Marin's classic executor was timed on.

    uv run python scripts/bench/bench_plan_marin.py [--steps 10000] [--repeats 3]

The DAG (seeded): step i > 0 takes 1-3 parents drawn uniformly from the earlier steps; every
step has a 30-field frozen config holding a nested dataclass (one shared instance, as experiments
share an optimizer config), every field hashed. Each mode is a fresh `python` process on this
file's `experiment` entry point (median of --repeats), so interpreter start, imports, building the
10k `ExecutorStep`s, hashing, status reads, planning and printing are all in the figure:

    build      start + build the steps, no planning (the floor the other modes stand on)
    dry-empty  --dry-run --json on an empty prefix
    dry-done   --dry-run --json with every step complete
    noop       the no-op re-run with every step complete ("nothing to do")

"All complete" is a prefix holding a SUCCESS status.json per step, written as a real run writes it
(digest, step id, and the function fingerprint that lets drift checks skip the record).
Targets (issue 14): dry-done <= 1.0 s and noop <= 0.8 s wall at 10k steps. A bare `python -c pass`
is timed in the same run as the anchor, and CPU time (user + sys) is shown beside wall time: on a
shared machine wall time also counts waiting for a core. The children run with bytecode caches
(PYTHONDONTWRITEBYTECODE dropped, one warm-up run first), as any second run of a user's does.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from dataclasses import dataclass

N_FIELDS = 30  # top-level fields of StepConfig, counted by the test in tests/executor/test_bench_dag.py


@dataclass(frozen=True)
class OptimizerConfig:
    learning_rate: float = 3e-4
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    warmup_steps: int = 1000
    schedule: str = "cosine"
    clip_norm: float = 1.0


@dataclass(frozen=True)
class StepConfig:
    inputs: tuple
    output_path: object
    seed: int
    optimizer: OptimizerConfig
    name: str = "step"
    batch_size: int = 256
    seq_len: int = 4096
    vocab_size: int = 128_256
    d_model: int = 2048
    n_layers: int = 24
    n_heads: int = 16
    dropout: float = 0.0
    tie_embeddings: bool = False
    tokenizer: str = "meta-llama/Llama-3.1-8B"
    data_mix: tuple = ("dclm", "starcoder", "proofpile")
    mix_weights: tuple = (0.7, 0.2, 0.1)
    tags: list = dataclasses.field(default_factory=lambda: ["marin", "bench"])
    extra: dict = dataclasses.field(default_factory=lambda: {"mode": "train", "shards": [1, 2, 3]})
    num_train_steps: int = 10_000
    eval_interval: int = 1000
    z_loss: float = 1e-4
    precision: str = "bf16"
    use_flash: bool = True
    rope_theta: float = 500_000.0
    init_std: float = 0.02
    max_grad_norm: float = 1.0
    data_seed: int = 0
    shuffle: bool = True
    mask_prob: float = 0.15
    notes: str | None = None


def bench_step(config: StepConfig) -> None:
    """The step function (never called: the benchmark only plans)."""


def marin_dag(n: int, seed: int = 0) -> list:
    from executor import ExecutorStep, output_path_of, this_output_path

    rng = random.Random(seed)
    optimizer = OptimizerConfig()
    steps: list = []
    for i in range(n):
        parents = sorted(rng.sample(range(i), min(i, rng.randint(1, 3)))) if i else []
        config = StepConfig(inputs=tuple(output_path_of(steps[p]) for p in parents),
                            output_path=this_output_path(), seed=i, optimizer=optimizer, name=f"s{i}")
        steps.append(ExecutorStep(f"marin/s{i:05d}", bench_step, config))
    return steps


def experiment(argv: list[str]) -> None:
    """`python bench_plan_marin.py experiment N [--build-only | executor flags]`."""
    n, rest = int(argv[0]), argv[1:]
    steps = marin_dag(n)
    if rest == ["--build-only"]:
        return
    from executor import executor_main

    executor_main(steps, description=f"Marin-style DAG, {n} steps", argv=rest)


def populate(prefix: str, plan: dict) -> None:
    """A SUCCESS status per step, as a real run commits it."""
    import time

    from executor.core.record import Owner, State, Status, status_key
    from executor.engine.provenance import function_fingerprint
    from executor.engine.store.local import LocalStore

    store = LocalStore(prefix)
    owner = Owner("bench", "host", 1, "user")
    fingerprint = function_fingerprint(bench_step)
    for row in plan["steps"]:
        rel = row["output_path"][len(prefix) + 1:]
        status = Status(State.SUCCESS, row["digest"], row["step_id"], 1, 1, owner, time.time(),
                        function_sha256=fingerprint)
        store.create_if_absent(status_key(rel), status.to_bytes())


def timed(cmd: list[str], repeats: int) -> tuple[float, float, str]:
    """Median wall and median CPU (user + sys) seconds of `repeats` runs, and the last stdout."""
    import os
    import resource
    import statistics
    import subprocess
    import time

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    walls, cpus, out = [], [], ""
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        out = done.stdout
    return statistics.median(walls), statistics.median(cpus), out


def main() -> None:
    import json
    import os
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    me = [sys.executable, os.path.abspath(__file__), "experiment", str(args.steps)]
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "prefix")
        timed(me[:-1] + ["100", "--dry-run", "--json", "--prefix", prefix], 1)  # fills bytecode caches
        figures = {"python -c pass": timed([sys.executable, "-c", "pass"], args.repeats)}
        figures["build"] = timed(me + ["--build-only"], args.repeats)
        figures["dry-empty"] = timed(me + ["--dry-run", "--json", "--prefix", prefix], args.repeats)
        empty_plan = json.loads(figures["dry-empty"][2])
        assert len(empty_plan["steps"]) == args.steps
        assert not os.path.exists(prefix), "a dry run must write nothing"
        populate(prefix, empty_plan)
        figures["dry-done"] = timed(me + ["--dry-run", "--json", "--prefix", prefix], args.repeats)
        done_plan = json.loads(figures["dry-done"][2])
        assert {r["action"] for r in done_plan["steps"]} == {"skip"}, "every step must be complete"
        assert [r["digest"] for r in done_plan["steps"]] == [r["digest"] for r in empty_plan["steps"]]
        figures["noop"] = timed(me + ["--prefix", prefix], args.repeats)
        assert "nothing to do" in figures["noop"][2], figures["noop"][2]
    print(f"{args.steps} steps, whole process, median of {args.repeats}")
    print(f"  {'mode':<16} {'wall s':>7} {'cpu s':>7}")
    targets = {"dry-done": 1.0, "noop": 0.8}
    for mode, (wall, cpu, _) in figures.items():
        target = f"  target wall <= {targets[mode]:.1f} s: {'met' if wall <= targets[mode] else 'NOT met'}" \
            if mode in targets and args.steps == 10_000 else ""
        print(f"  {mode:<16} {wall:7.2f} {cpu:7.2f}{target}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["experiment"]:
        experiment(sys.argv[2:])
    else:
        main()
