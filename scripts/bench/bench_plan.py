"""Planning cost: a synthetic DAG (mixed fan-in/fan-out, ~30-field configs), every status present.

    uv run python scripts/bench/bench_plan.py [--sizes 1000 2000 5000 10000]

Prints build (hash) / status-read / plan times per size and per step, and how the per-step cost
grows from the smallest to the largest size (linear growth keeps it flat). Target: 10k < 3 s.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import dataclass, field

from executor import ExecutorStep, output_path_of, this_output_path
from executor.core.graph import build_graph
from executor.core.plan import PlanOptions, plan_steps
from executor.core.record import Owner, State, Status, status_key
from executor.engine.run.legacy_carry import carry_over
from executor.engine.run.snapshot import read_snapshot
from executor.engine.store.local import LocalStore


@dataclass(frozen=True)
class Knobs:
    learning_rate: float = 3e-4
    warmup: int = 100
    schedule: str = "cosine"
    betas: tuple = (0.9, 0.95)
    clip: float = 1.0


@dataclass(frozen=True)
class WideConfig:
    inputs: tuple = ()
    output_path: object = None
    seed: int = 0
    f01: int = 1
    f02: float = 0.5
    f03: str = "alpha"
    f04: bool = True
    f05: tuple = (1, 2, 3)
    f06: list = field(default_factory=lambda: ["a", "b"])
    f07: dict = field(default_factory=lambda: {"k": 1, "j": [1.5, 2.5]})
    f08: int = 8
    f09: float = 9.0
    f10: str = "ten"
    f11: int = 11
    f12: float = 12.0
    f13: str = "thirteen"
    f14: bool = False
    f15: int = 15
    f16: float = 16.0
    f17: str = "seventeen"
    f18: int = 18
    f19: tuple = ("x",)
    f20: float = 20.0
    f21: int = 21
    f22: str = "twenty-two"
    f23: int = 23
    f24: float = 24.0
    f25: str = "twenty-five"
    f26: int = 26
    knobs: Knobs = Knobs()


def noop(config: WideConfig) -> None:
    return None


def synthetic_dag(n: int, seed: int = 0) -> list[ExecutorStep]:
    """Layers of steps; each depends on 0-4 earlier steps (fan-in), popular ones fan out widely."""
    rng = random.Random(seed)
    steps: list[ExecutorStep] = []
    for i in range(n):
        k = 0 if i < 20 else rng.choice([1, 1, 2, 3, 4])
        parents = {min(int(rng.paretovariate(1.2)) - 1, len(steps) - 1) if rng.random() < 0.3
                   else rng.randrange(len(steps)) for _ in range(k)} if steps else set()
        config = WideConfig(inputs=tuple(output_path_of(steps[p]) for p in sorted(parents)),
                            output_path=this_output_path(), seed=i)
        steps.append(ExecutorStep(f"bench/s{i:05d}", noop, config))
    return steps


def populate(store: LocalStore, graph) -> None:
    owner = Owner("bench", "host", 1, "user")
    for node in graph.nodes.values():
        status = Status(State.SUCCESS, node.digest, node.step_id, 1, 1, owner, time.time())
        store.create_if_absent(status_key(node.output_rel), status.to_bytes())


def measure(n: int) -> dict[str, float]:
    steps = synthetic_dag(n)
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(tmp)
        populate(store, build_graph(steps))
        t0 = time.perf_counter()
        graph = build_graph(steps)
        t1 = time.perf_counter()
        snapshot = read_snapshot(store, graph.nodes.values())
        snapshot = carry_over(graph, snapshot, store, None, tmp, write=False)  # as api.decide: legacy ids
        t2 = time.perf_counter()
        plan = plan_steps(graph, snapshot, PlanOptions())
        t3 = time.perf_counter()
    assert len(plan.decisions) == n and not plan.needs_runner
    return {"hash": t1 - t0, "read": t2 - t1, "plan": t3 - t2, "total": t3 - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    args = parser.parse_args()
    results = {}
    print(f"{'steps':>7} {'hash s':>8} {'read s':>8} {'plan s':>8} {'total s':>8} {'ms/step':>8}")
    for n in args.sizes:
        r = results[n] = measure(n)
        print(f"{n:>7} {r['hash']:>8.3f} {r['read']:>8.3f} {r['plan']:>8.3f} {r['total']:>8.3f} "
              f"{1000 * r['total'] / n:>8.3f}")
    small, large = min(results), max(results)
    growth = (results[large]["total"] / large) / (results[small]["total"] / small)
    print(f"per-step cost at {large} vs {small} steps: {growth:.2f}x (1.0 = perfectly linear)")
    print(f"target: {large} steps under 3 s -> {'met' if results[large]['total'] < 3 else 'NOT met'} "
          f"({results[large]['total']:.2f} s)")


if __name__ == "__main__":
    main()
