"""The MoE training step: `train(TrainConfig(...)) -> dict` over a token cache (see loop.py).

`train` is imported on first use (PEP 562): it imports JAX (seconds of CPU), which the configs and
the commands that only read a run's files (`python -m steps.train.batch_documents`) do not need."""

from steps.extras import TRAIN, require_extra

require_extra("train", "steps.train", TRAIN)

from steps.train.config import ModelConfig, OptimizerConfig, TrainConfig  # noqa: E402

__all__ = ["ModelConfig", "OptimizerConfig", "TrainConfig", "train"]


def __getattr__(name: str):
    if name == "train":
        from steps.train.loop import train

        return train
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
