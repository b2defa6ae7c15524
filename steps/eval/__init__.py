"""The eval step: `evaluate(EvalConfig(...)) -> dict` — loss, perplexity and bits-per-byte of a
trained model on the validation split, honest baselines beside it, and a multiple-choice task."""

from steps.extras import TRAIN, require_extra

require_extra("train", "steps.eval", TRAIN)

from steps.eval.step import EvalConfig, evaluate

__all__ = ["EvalConfig", "evaluate"]
