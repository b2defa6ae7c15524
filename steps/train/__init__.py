"""The MoE training step: `train(TrainConfig(...)) -> dict` over a token cache (see loop.py)."""

from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig
from steps.train.loop import train

__all__ = ["ModelConfig", "OptimizerConfig", "TrainConfig", "train"]
