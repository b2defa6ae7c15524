"""A small isoFLOP sweep of the MoE on Shakespeare: for each FLOP budget, a few model widths,
each trained for as many tokens as the budget buys (6 x active params per token + attention),
then evaluated; a last step plots validation bits-per-byte against width, one curve per budget.

    uv run python experiments/moe_isoflop.py --dry-run
    uv run python experiments/moe_isoflop.py            # data steps are shared with tiny_moe.py

The training steps are independent, so the executor runs them side by side (1 CPU each).
Sizes are tiny on purpose: this shows the shape of a sweep, not a scaling law.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from executor import ExecutorStep, Resources, executor_main, open_file, output_path_of, this_output_path
from experiments.tiny_moe import TINY_MODEL, data_steps
from steps.eval import EvalConfig, evaluate
from steps.train import OptimizerConfig, TrainConfig, train


@dataclass(frozen=True)
class IsoflopOptions:
    budgets: tuple[float, ...] = (3e10, 1e11)  # training FLOP budgets, one curve each
    widths: tuple[int, ...] = (32, 64, 96)  # model widths (d_model) trained at every budget
    vocab_size: int = 2048  # BPE vocabulary of the shared data steps
    batch_size: int = 8  # sequences per step


@dataclass(frozen=True)
class PlotConfig:
    eval_paths: list[str]
    budgets: list[float]
    widths: list[int]
    output_path: str


def plot_isoflop(config: PlotConfig) -> dict:
    """bits-per-byte vs width per budget -> isoflop.png (+ the points as isoflop.json)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = []
    for path, budget, width in zip(config.eval_paths, config.budgets, config.widths, strict=True):
        with open_file(f"{path}/results.json", "r") as f:
            results = json.load(f)
        points.append({"budget": budget, "width": width, "bpb": results["model"]["bits_per_byte"]})
    fig, ax = plt.subplots(figsize=(5, 3.5))
    best = {}
    for budget in sorted({p["budget"] for p in points}):
        curve = sorted((p["width"], p["bpb"]) for p in points if p["budget"] == budget)
        ax.plot([w for w, _ in curve], [b for _, b in curve], marker="o", label=f"{budget:.0e} FLOPs")
        best[f"{budget:.0e}"] = min(curve, key=lambda wb: wb[1])[0]
    ax.set_xlabel("d_model")
    ax.set_ylabel("validation bits/byte")
    ax.set_title("MoE isoFLOP sweep (Shakespeare)")
    ax.legend()
    fig.tight_layout()
    with open_file(f"{config.output_path}/isoflop.png", "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    with open_file(f"{config.output_path}/isoflop.json", "w") as f:
        f.write(json.dumps(points, indent=1))
    return {"points": len(points), "best_width_per_budget": best, "plot": f"{config.output_path}/isoflop.png"}


def model_of_width(width: int, vocab_size: int):
    heads = max(1, width // 16)
    return dataclasses.replace(TINY_MODEL, vocab_size=vocab_size, d_model=width, n_heads=heads,
                               d_ff=3 * width, d_expert=max(8, 3 * width // 4))


def steps_for_budget(budget: float, model, batch_size: int) -> int:
    tokens_per_step = batch_size * model.seq_len
    return max(10, int(budget // (model.flops_per_token() * tokens_per_step)))


def build(options: IsoflopOptions) -> list[ExecutorStep]:
    _, tokens = data_steps(options.vocab_size)
    evals, budgets, widths = [], [], []
    for budget in options.budgets:
        for width in options.widths:
            model = model_of_width(width, options.vocab_size)
            n = steps_for_budget(budget, model, options.batch_size)
            trained = ExecutorStep(
                f"isoflop/train-{budget:.0e}-d{width}", train,
                TrainConfig(cache_path=output_path_of(tokens), output_path=this_output_path(), model=model,
                            batch_size=options.batch_size, num_steps=n, checkpoint_every=max(n // 2, 1),
                            log_every=10, optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=min(20, n // 5))),
                resources=Resources(cpus=1))
            evals.append(output_path_of(ExecutorStep(
                f"isoflop/eval-{budget:.0e}-d{width}", evaluate,
                EvalConfig(train_path=output_path_of(trained), cache_path=output_path_of(tokens),
                           output_path=this_output_path(), max_eval_tokens=30_000, task=None),
                resources=Resources(cpus=1))))
            budgets.append(budget)
            widths.append(width)
    plot = ExecutorStep("isoflop/plot", plot_isoflop,
                        PlotConfig(eval_paths=evals, budgets=budgets, widths=widths, output_path=this_output_path()))
    return [plot]


if __name__ == "__main__":
    executor_main(build, "MoE isoFLOP sweep on Shakespeare", config=IsoflopOptions())
