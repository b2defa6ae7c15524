"""The MoE training step: `train(TrainConfig(...)) -> dict` over a token cache (see loop.py)."""

from steps.extras import TRAIN, require_extra

require_extra("train", "steps.train", TRAIN)

from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig
from steps.train.loop import train

__all__ = ["ModelConfig", "OptimizerConfig", "TrainConfig", "train"]
