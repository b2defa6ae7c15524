"""Multi-host steps: which process of the group this is, and the `jax.distributed` bootstrap.

A step declared with `Resources(hosts=N)` runs its function once in each of N host processes
(one per node of a placement group). The runner sets the group's coordinates in the
environment and calls `initialize()` before the step function, so the function can use JAX
collectives (`jax.lax.psum`, `multihost_utils.process_allgather`) across hosts directly. Only
process 0's return value is recorded; a failure in any process fails the step.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

ENV_COORDINATOR = "STEPGRAPH_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "STEPGRAPH_NUM_PROCESSES"
ENV_PROCESS_ID = "STEPGRAPH_PROCESS_ID"


@dataclass(frozen=True)
class HostContext:
    """Where this process sits in its step's group of host processes."""

    coordinator_address: str  # "ip:port" of process 0's coordination service
    num_processes: int
    process_id: int

    @property
    def is_primary(self) -> bool:
        return self.process_id == 0

    def to_env(self) -> dict[str, str]:
        return {ENV_COORDINATOR: self.coordinator_address, ENV_NUM_PROCESSES: str(self.num_processes),
                ENV_PROCESS_ID: str(self.process_id)}


def current() -> HostContext | None:
    """The group this process belongs to, or None for an ordinary single-host step."""
    address = os.environ.get(ENV_COORDINATOR)
    if not address:
        return None
    return HostContext(address, int(os.environ[ENV_NUM_PROCESSES]), int(os.environ[ENV_PROCESS_ID]))


def process_id() -> int:
    ctx = current()
    return ctx.process_id if ctx else 0


def num_processes() -> int:
    ctx = current()
    return ctx.num_processes if ctx else 1


def is_primary() -> bool:
    """True in process 0 (whose return value is recorded) and in single-host steps."""
    return process_id() == 0


def free_port(host: str = "") -> int:
    """A TCP port free right now on this machine (used by process 0's node for the coordinator)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_initialized = False


def initialize(ctx: HostContext | None = None, *, timeout_s: int = 300) -> HostContext | None:
    """Export the group's coordinates and start `jax.distributed` (once per process).

    On CPU, collectives go through gloo (`jax_cpu_collectives_implementation`); the setting only
    affects the CPU backend, so it is harmless on GPU/TPU hosts. Must run before JAX creates
    its backends, i.e. before the step touches any jax array.
    """
    global _initialized
    ctx = ctx or current()
    if ctx is None:
        return None
    os.environ.update(ctx.to_env())
    if _initialized:
        return ctx
    from executor.core.extras import require_extra

    require_extra("train", "a multi-host step (Resources.hosts above 1)", "jax")
    import jax

    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError, KeyError):  # older/newer jax without this option
        pass
    jax.distributed.initialize(coordinator_address=ctx.coordinator_address,
                               num_processes=ctx.num_processes, process_id=ctx.process_id,
                               initialization_timeout=timeout_s)
    _initialized = True
    return ctx


def shutdown() -> None:
    global _initialized
    if _initialized:
        import jax

        try:
            jax.distributed.shutdown()
        finally:
            _initialized = False
