"""The runner seam: what the executor hands a runner, and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from executor.core.step import Resources
from executor.core.locations import Storage

if TYPE_CHECKING:  # imported where used: a worker running a step without --cache-from never loads it
    from executor.engine.worker.shard_sources import CacheFrom


@dataclass(frozen=True)
class StepCall:
    """One attempt at one step: the function, its resolved config, and where it may run."""

    step_id: str
    fn: Callable[[Any], Any]
    config: Any
    output_path: str
    resources: Resources = field(default_factory=Resources)
    env: dict[str, str] = field(default_factory=dict)
    attempt: int = 1  # the lease's attempt number: names the log file <output>/.executor/logs/attempt-<n>.log
    # The run's storage options keyed by location (endpoints, credentials), for the worker that runs
    # the step: never part of a config, id or record, and hidden from every repr.
    storage: Storage = field(default_factory=Storage, repr=False)
    # The run's prefix and --cache-from prefixes, where a step may find shard results (engine/worker/shard_sources.py)
    cache_from: CacheFrom | None = None


@dataclass(frozen=True)
class StepOutcome:
    """How an attempt ended. `infrastructure` separates a dead worker from an error in user code."""

    ok: bool
    result: Any = None
    error: str | None = None
    traceback: str | None = None
    infrastructure: bool = False
    attempts: tuple[dict[str, Any], ...] = ()  # each try the runner made: {"try", "cause", "error", "seconds"}
    needs_ray: bool = False  # stopped at a fan-out off Ray (auto runner): to be run again on Ray


class StepHandle(Protocol):
    call: StepCall

    def done(self) -> bool: ...

    def outcome(self) -> StepOutcome: ...

    def cancel(self) -> None: ...


class Runner(Protocol):
    def check_steps(self, steps: Iterable[tuple[str, Resources]], *, prefix_is_local: bool) -> list[str]:
        """Every reason these (name, resources) steps could never run here; checked before anything runs."""
        ...

    def submit(self, call: StepCall) -> StepHandle: ...

    def wait(self, handles: Sequence[StepHandle], timeout: float) -> list[StepHandle]:
        """Block up to `timeout` seconds; the handles that are done (possibly none)."""
        ...

    def shutdown(self) -> None: ...
