"""The eval step: `evaluate(EvalConfig(...)) -> dict` — loss, perplexity and bits-per-byte of a
trained model on the validation split, honest baselines beside it, and a multiple-choice task."""

from steps.eval.step import EvalConfig, evaluate

__all__ = ["EvalConfig", "evaluate"]
