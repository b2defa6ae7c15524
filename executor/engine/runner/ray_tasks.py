"""What runs inside Ray workers for a step, and how a step's finished Ray task is classified.

Ray ships these remote functions by reference (module and name), so a worker imports this small
module (and base/capture), not the driver-side runner. `classify` and `cause_of` tell an error in
the step's own code from a lost worker or node; RayHandle retries only the latter.
"""

from __future__ import annotations

from typing import Any

from executor.core.locations import Storage
from executor.engine.prefix import location
from executor.engine.runner.base import StepCall, StepOutcome
from executor.engine.runner.capture import captured_output
from executor.engine.runner.log_forwarding import output_key, print_end_markers


# -- code that runs in Ray workers ---------------------------------------------------------
def execute_remotely(call: StepCall, log: str | None, header: str) -> StepOutcome:
    from executor.engine.runner.inline import run_call

    try:
        with captured_output(log, header, call.storage):  # the log's upload needs the options too
            return run_call(call)
    finally:  # outside the capture: for the driver's console, not the attempt log
        print_end_markers(output_key(call.step_id, call.attempt))


def execute_host(call: StepCall, log: str | None, header: str, host: Any) -> StepOutcome:
    """One process of a multi-host step: bootstrap jax.distributed, then run the function."""
    from executor.engine.worker import multihost
    from executor.engine.runner.inline import run_call

    with captured_output(log, header, call.storage):
        try:
            multihost.initialize(host)
        except Exception as e:  # noqa: BLE001 - the group could not form: not the step's fault
            return StepOutcome(ok=False, error=f"multi-host bootstrap failed on process {host.process_id}: "
                                               f"{type(e).__name__}: {e}", infrastructure=True)
        try:
            return run_call(call)
        finally:
            try:
                multihost.shutdown()
            except Exception:  # noqa: BLE001 - the worker process exits after this task anyway
                pass


def run_shard(storage: Storage, fn: Any, item: Any) -> Any:
    """One map_shards item in a Ray worker, with the storage options of the step that fanned out."""
    with location.using(storage):
        return fn(item)


def coordinator_address() -> str:
    import ray

    from executor.engine.worker.multihost import free_port

    return f"{ray.util.get_node_ip_address()}:{free_port()}"


# -- outcomes ------------------------------------------------------------------------------
def classify(error: BaseException) -> tuple[str, StepOutcome]:
    """(cause, outcome) for an exception raised by ray.get on a step's task."""
    from ray import exceptions as rex

    if isinstance(error, rex.TaskCancelledError):
        return "cancelled", StepOutcome(ok=False, error="cancelled", infrastructure=True)
    if isinstance(error, rex.RayTaskError):  # outside the user function: e.g. unpickling the call
        cause = getattr(error, "cause", None) or error
        return "user", StepOutcome(ok=False, error=f"{type(cause).__name__}: {cause}"[:2000],
                                   traceback=str(error)[-4000:])
    if isinstance(error, (rex.RuntimeEnvSetupError, rex.TaskUnschedulableError)):
        return "config", StepOutcome(ok=False, error=f"{type(error).__name__}: {str(error)[:1500]}")
    # WorkerCrashedError, NodeDiedError, OutOfMemoryError, ObjectLostError, RaySystemError, ...
    return "infrastructure", StepOutcome(ok=False, error=f"{type(error).__name__}: {str(error)[:500]}",
                                         infrastructure=True)


def cause_of(outcome: StepOutcome) -> str:
    if outcome.ok:
        return "ok"
    return "infrastructure" if outcome.infrastructure else "user"
