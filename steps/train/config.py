"""Configuration of the MoE training step: model shape, optimizer, and the run itself.

All three are frozen dataclasses. Fields that change how a run executes but not what it
produces (checkpoint cadence, logging, device count) are `execution_only` and stay out of the
step's identity. Each class validates itself and names the offending field in its error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from executor import execution_only, hashed_unless_default
from steps.tracking import check_trackers

ROUTER_AFFINITIES = ("sigmoid", "softmax")
BALANCE_MODES = ("aux_free", "aux_loss", "none")
EXPERT_IMPLS = ("ragged", "dense")
CROSS_ENTROPY_IMPLS = ("blockwise", "naive")
REMAT_POLICIES = ("none", "full", "dots_saveable")
SCHEDULES = ("cosine", "wsd")
OPTIMIZERS = ("adamw", "muon")
ATTENTION_IMPLS = ("auto", "xla", "cudnn")
COMPUTE_DTYPES = ("float32", "bfloat16")


def _require(ok: bool, cls: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{cls}: {message}")


def _one_of(cls: str, name: str, value: str, allowed: tuple[str, ...]) -> None:
    _require(value in allowed, cls, f"{name}={value!r} is not one of {list(allowed)}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a DeepSeek-style MoE decoder: `n_dense` dense SwiGLU layers, then MoE layers.

    `vocab_size=None` means "take it from the token cache" (the train step fills it in).
    """

    vocab_size: int | None = None
    seq_len: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 3
    n_dense: int = 1
    d_ff: int = 128                 # hidden width of the dense SwiGLU layers
    n_experts: int = 8
    top_k: int = 2
    d_expert: int = 32              # hidden width of one routed expert
    n_shared: int = 1               # shared experts (each of width d_expert), 0 for none
    router_affinity: str = "sigmoid"
    balance: str = "aux_free"       # aux_free: bias balancing; aux_loss: switch-style loss
    bias_update_rate: float = 1e-2  # aux-free: step size of the sign update of the router bias
    aux_loss_coef: float = 1e-2
    z_loss_coef: float = 1e-3
    rope_theta: float = 10000.0
    init_std: float = 0.02
    expert_impl: str = "ragged"     # ragged: sorted tokens + ragged_dot; dense: every expert
    # Memory levers: they change what is kept in memory, not what is computed (equal within
    # float32 rounding, tested), so they stay out of the step's identity.
    cross_entropy: str = execution_only("blockwise")  # blockwise: never holds [tokens, vocab] logits
    ce_block_size: int = execution_only(8192)          # vocabulary columns per block
    remat: str = execution_only("none")  # per layer: none | full (keep inputs only) | dots_saveable
    # jax.nn.dot_product_attention's implementation: auto (cuDNN's fused kernel on a GPU in 16-bit,
    # else XLA) | xla | cudnn. How attention runs, not what it computes.
    attention: str = execution_only("auto")

    def __post_init__(self) -> None:
        c = "ModelConfig"
        for name in ("seq_len", "d_model", "n_heads", "n_layers", "d_ff", "n_experts", "top_k", "d_expert",
                     "ce_block_size"):
            _require(getattr(self, name) >= 1, c, f"{name}={getattr(self, name)!r} must be >= 1")
        _require(self.vocab_size is None or self.vocab_size >= 2, c,
                 f"vocab_size={self.vocab_size!r} must be >= 2 (or None to read it from the cache)")
        _require(self.top_k <= self.n_experts, c,
                 f"top_k={self.top_k} exceeds n_experts={self.n_experts}; pick top_k <= n_experts")
        _require(0 <= self.n_dense <= self.n_layers, c,
                 f"n_dense={self.n_dense} must be between 0 and n_layers={self.n_layers}")
        _require(self.n_shared >= 0, c, f"n_shared={self.n_shared} must be >= 0")
        _require(self.d_model % self.n_heads == 0, c,
                 f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        _require((self.d_model // self.n_heads) % 2 == 0, c,
                 f"head size d_model/n_heads={self.d_model // self.n_heads} must be even for RoPE")
        _one_of(c, "router_affinity", self.router_affinity, ROUTER_AFFINITIES)
        _one_of(c, "balance", self.balance, BALANCE_MODES)
        _one_of(c, "expert_impl", self.expert_impl, EXPERT_IMPLS)
        _one_of(c, "cross_entropy", self.cross_entropy, CROSS_ENTROPY_IMPLS)
        _one_of(c, "remat", self.remat, REMAT_POLICIES)
        _one_of(c, "attention", self.attention, ATTENTION_IMPLS)

    @property
    def n_moe(self) -> int:
        return self.n_layers - self.n_dense

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def active_params(self) -> int:
        """Parameters touched per token (embedding excluded, unembedding included)."""
        d, v = self.d_model, self.vocab_size or 0
        attn = 4 * d * d
        dense = 3 * d * self.d_ff
        moe = d * self.n_experts + 3 * d * self.d_expert * (self.top_k + self.n_shared)
        return self.n_layers * attn + self.n_dense * dense + self.n_moe * moe + d * v

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 x active params + attention scores (fwd+bwd)."""
        return 6.0 * self.active_params() + 6.0 * self.n_layers * self.seq_len * self.d_model


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW (or Muon for matrices) behind global-norm clipping, with warmup + cosine/WSD."""

    kind: str = "adamw"
    learning_rate: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    schedule: str = "cosine"
    decay_fraction: float = 0.2     # WSD: share of steps spent decaying at the end
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        c = "OptimizerConfig"
        _one_of(c, "kind", self.kind, OPTIMIZERS)
        _one_of(c, "schedule", self.schedule, SCHEDULES)
        _require(self.learning_rate > 0, c, f"learning_rate={self.learning_rate!r} must be > 0")
        _require(0 <= self.min_lr_ratio <= 1, c, f"min_lr_ratio={self.min_lr_ratio!r} must be in [0, 1]")
        _require(self.warmup_steps >= 0, c, f"warmup_steps={self.warmup_steps!r} must be >= 0")
        _require(0 < self.decay_fraction <= 1, c, f"decay_fraction={self.decay_fraction!r} must be in (0, 1]")
        _require(self.clip_norm > 0, c, f"clip_norm={self.clip_norm!r} must be > 0")


@dataclass(frozen=True)
class TrainConfig:
    """One training run over a token cache; writes checkpoints and metrics.jsonl to output_path."""

    cache_path: str
    output_path: str
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    batch_size: int = 8             # sequences per step (global, across devices)
    num_steps: int = 100
    seed: int = 0
    checkpoint_every: int = execution_only(50)
    keep_checkpoints: int = execution_only(2)       # rolling checkpoints kept
    permanent_every: int | None = execution_only(None)  # these steps are never deleted
    async_checkpoints: bool = execution_only(True)  # write checkpoints in the background while training goes on
    log_every: int = execution_only(10)
    metrics_flush_s: float = execution_only(10.0)  # metrics.jsonl rewritten at most this often between checkpoints
    num_devices: int = execution_only(1)           # data-parallel devices, across all hosts (output-invariant)
    fsdp: bool = execution_only(False)             # shard parameters and optimizer state over the devices too
    expert_parallel: bool = execution_only(False)  # shard experts over the mesh's expert axis
    # devices per expert group (the mesh's expert axis); None: all of them. With EP across hosts,
    # devices per host keeps token traffic inside a host and makes the data axis cross hosts.
    expert_axis_size: int | None = execution_only(None)
    expert_dispatch: str = execution_only("all_gather")  # how tokens reach experts: all_gather | all_to_all
    # all_to_all buffer rows per destination = ceil(factor * local assignments / expert-axis devices);
    # None never drops (results equal the single-device layer). Dropping changes results: hashed.
    expert_capacity_factor: float | None = None
    # dtype of matmuls and activations (float32 | bfloat16); params and optimizer state stay float32.
    # It changes results, so it is hashed; float32 (what every run did before the field) is left out
    # of the id, so the ids of existing runs stay.
    compute_dtype: str = hashed_unless_default("float32")
    trackers: tuple[str, ...] = execution_only(())  # "wandb", "tensorboard": see steps/tracking.py

    def __post_init__(self) -> None:
        c = "TrainConfig"
        for name in ("batch_size", "num_steps", "checkpoint_every", "keep_checkpoints", "log_every", "num_devices"):
            _require(getattr(self, name) >= 1, c, f"{name}={getattr(self, name)!r} must be >= 1")
        check_trackers(self.trackers, c)
        _require(self.metrics_flush_s >= 0, c, f"metrics_flush_s={self.metrics_flush_s!r} must be >= 0")
        _require(self.batch_size % self.num_devices == 0, c,
                 f"batch_size={self.batch_size} is not divisible by num_devices={self.num_devices}")
        _one_of(c, "expert_dispatch", self.expert_dispatch, ("all_gather", "all_to_all"))
        _one_of(c, "compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        _require(self.expert_capacity_factor is None or self.expert_capacity_factor > 0, c,
                 f"expert_capacity_factor={self.expert_capacity_factor!r} must be > 0 (or None: never drop)")
        _require(self.expert_capacity_factor is None or (self.expert_parallel and self.expert_dispatch == "all_to_all"),
                 c, f"expert_capacity_factor={self.expert_capacity_factor!r} only applies with expert_parallel=True "
                    f"and expert_dispatch='all_to_all'; set those or leave it None")
        _require(self.expert_axis_size is None or self.expert_axis_size >= 1, c,
                 f"expert_axis_size={self.expert_axis_size!r} must be >= 1 (or None: every device)")
        experts_over = self.expert_devices
        _require(self.expert_axis_size is None or self.expert_parallel, c,
                 f"expert_axis_size={self.expert_axis_size!r} only applies with expert_parallel=True; "
                 f"set it or leave expert_axis_size None")
        _require(self.num_devices % experts_over == 0, c,
                 f"expert_axis_size={experts_over} must divide num_devices={self.num_devices}")
        _require(not self.expert_parallel or self.model.n_experts % experts_over == 0, c,
                 f"expert_parallel needs model.n_experts={self.model.n_experts} divisible by the "
                 f"expert axis ({experts_over} devices; set expert_axis_size to a divisor of both)")

    @property
    def expert_devices(self) -> int:
        """The size of the mesh's expert axis."""
        if not self.expert_parallel:
            return 1
        return self.num_devices if self.expert_axis_size is None else self.expert_axis_size

    @classmethod
    def tiny(cls, cache_path: str, output_path: str, **overrides) -> "TrainConfig":
        """A preset that trains in well under a minute on 2 CPU cores."""
        base = cls(cache_path=cache_path, output_path=output_path, num_steps=60, batch_size=8,
                   checkpoint_every=20, log_every=10)
        return dataclasses.replace(base, **overrides)
