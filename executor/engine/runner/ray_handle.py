"""One step on Ray across its tries: a single task, or a placement group of host tasks.

RayHandle is the runner's per-step state machine. It launches the step (for a multi-host step:
reserve one bundle per host, find a coordinator address inside the group, start one task per
host), classifies how each try ended, and retries infrastructure failures with backoff up to the
step's `max_infra_retries`. An error in the step's own code ends the step; every try is recorded
with its cause.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Protocol, Sequence

from executor.engine.runner.base import StepCall, StepOutcome
from executor.engine.runner import log_forwarding
from executor.engine.runner.capture import log_path
from executor.engine.runner.cluster import MULTIHOST_PLACEMENT
from executor.engine.runner.ray_tasks import cause_of, classify, coordinator_address
from executor.core.step import Resources

BACKOFF_CAP_S = 60.0


class Launcher(Protocol):
    """What a handle needs from the runner that owns it (RayRunner provides it)."""

    capture_logs: bool
    retry_backoff_s: float
    remote_step: Any
    remote_host: Any
    notify: Callable[[str], None]

    def bundle(self, r: Resources) -> dict[str, float]: ...

    def task_options(self, call: StepCall, name: str | None = None) -> dict[str, Any]: ...

    def wait(self, handles: Sequence["RayHandle"], timeout: float) -> list["RayHandle"]: ...


class RayHandle:
    """One step on Ray, across its tries. A small state machine advanced by `poll`:

    single host: run -> done | backoff -> run ...
    multi-host:  placement group -> coordinator address -> host tasks -> done | backoff -> ...
    """

    def __init__(self, runner: Launcher, call: StepCall):
        self.runner, self.call = runner, call
        self.tries: list[dict[str, Any]] = []
        self._outcome: StepOutcome | None = None
        self._phase = "new"
        self._refs: list[Any] = []
        self._results: dict[int, StepOutcome] = {}
        self._pg = None
        self._retry_at = 0.0
        self._try_started = 0.0
        self._cancelled = False
        self._launch()

    # -- what the runner looks at ----------------------------------------------------------
    @property
    def hosts(self) -> int:
        return max(1, int(self.call.resources.hosts))

    def refs(self) -> list[Any]:
        return [] if self._outcome is not None else list(self._refs)

    def wake_at(self) -> float | None:
        return self._retry_at if self._outcome is None and self._phase == "backoff" else None

    # -- launching -------------------------------------------------------------------------
    def _log(self) -> tuple[str | None, str]:
        if not self.runner.capture_logs:
            return None, ""
        n = len(self.tries) + 1
        return (log_path(self.call.output_path, self.call.attempt),
                f"{self.call.step_id} attempt {self.call.attempt} try {n}")

    def _launch(self) -> None:
        self._try_started = time.monotonic()
        self._results = {}
        if self.hosts == 1:
            log, header = self._log()
            log_forwarding.forget(log_forwarding.output_key(self.call.step_id, self.call.attempt))
            options = self.runner.task_options(self.call)
            self._refs = [self.runner.remote_step.options(**options).remote(self.call, log, header)]
            self._phase = "run"
        else:
            from ray.util.placement_group import placement_group

            bundle = self.runner.bundle(self.call.resources)
            self._pg = placement_group([dict(bundle) for _ in range(self.hosts)],
                                       strategy=MULTIHOST_PLACEMENT)
            self._refs = [self._pg.ready()]
            self._phase = "placement"

    def _in_bundle(self, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=index,
                                                placement_group_capture_child_tasks=False)

    def _launch_hosts(self, coordinator: str) -> None:
        from executor.engine.worker.multihost import HostContext

        log, header = self._log()
        self._refs = []
        for i in range(self.hosts):
            options = self.runner.task_options(self.call, name=f"{self.call.step_id}[host {i}]")
            options["scheduling_strategy"] = self._in_bundle(i)
            host = HostContext(coordinator, self.hosts, i)
            host_log = log if (log is None or i == 0) else log.replace(".log", f".host{i}.log")
            self._refs.append(self.runner.remote_host.options(**options).remote(
                self.call, host_log, f"{header} host {i}/{self.hosts}", host))
        self._phase = "hosts"

    # -- advancing -------------------------------------------------------------------------
    def poll(self, ready: set | None = None) -> bool:
        """Advance without blocking; True once the step's outcome is known."""
        import ray

        if self._outcome is not None:
            return True
        if self._phase == "backoff":
            if time.monotonic() >= self._retry_at:
                self._launch()
            return False
        if ready is None:
            ready = set(ray.wait(self._refs, num_returns=len(self._refs), timeout=0)[0]) if self._refs else set()
        finished = [r for r in self._refs if r in ready]
        if not finished:
            return False
        if self._phase == "run":
            cause, outcome = self._get(finished[0])
            if cause != "infrastructure":  # its last lines reach the console before its ✔ line
                log_forwarding.wait_for_output(log_forwarding.output_key(self.call.step_id, self.call.attempt))
            self._end_try(cause, outcome)
        elif self._phase == "placement":
            coordinator_task = ray.remote(coordinator_address).options(
                num_cpus=0, max_retries=2, scheduling_strategy=self._in_bundle(0))
            self._refs = [coordinator_task.remote()]
            self._phase = "coordinator"
        elif self._phase == "coordinator":
            try:
                address = ray.get(finished[0])
            except Exception as e:  # noqa: BLE001
                self._end_try(*classify(e))
                return self._outcome is not None
            self._launch_hosts(address)
        elif self._phase == "hosts":
            for ref in finished:
                index = self._refs.index(ref)
                if index in self._results:
                    continue
                cause, outcome = self._get(ref)
                self._results[index] = outcome
                if not outcome.ok:  # one host failing fails the step: stop the others
                    host = f"host {index}: " if index else "host 0: "
                    self._stop_tasks()
                    self._end_try(cause, dataclasses.replace(outcome, error=host + (outcome.error or "failed")))
                    return self._outcome is not None
            if len(self._results) == self.hosts:
                self._end_try("ok", self._results[0])
        return self._outcome is not None

    def _get(self, ref: Any) -> tuple[str, StepOutcome]:
        import ray

        try:
            outcome = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - classified by cause
            return classify(e)
        return cause_of(outcome), outcome

    def _end_try(self, cause: str, outcome: StepOutcome) -> None:
        if self._cancelled:
            cause, outcome = "cancelled", StepOutcome(ok=False, error="cancelled", infrastructure=True)
        self.tries.append({"try": len(self.tries) + 1, "cause": cause, "error": outcome.error,
                           "seconds": round(time.monotonic() - self._try_started, 3), "hosts": self.hosts})
        self._release_group()
        self._refs = []
        infra_failures = sum(t["cause"] == "infrastructure" for t in self.tries)
        if cause == "infrastructure" and infra_failures <= self.call.resources.max_infra_retries:
            delay = min(BACKOFF_CAP_S, self.runner.retry_backoff_s * 2 ** (infra_failures - 1))
            self.runner.notify(f"{self.call.step_id}: infrastructure failure ({outcome.error}); "
                               f"retry {infra_failures}/{self.call.resources.max_infra_retries} in {delay:.1f}s")
            self._phase, self._retry_at = "backoff", time.monotonic() + delay
            return
        if cause == "infrastructure":
            outcome = dataclasses.replace(
                outcome, error=f"{outcome.error} (gave up after {infra_failures} infrastructure failure(s))")
        self._phase = "done"
        self._outcome = dataclasses.replace(outcome, attempts=tuple(self.tries))

    # -- stopping --------------------------------------------------------------------------
    def _stop_tasks(self) -> None:
        import ray

        if not self._refs:
            return
        finished, _ = ray.wait(self._refs, num_returns=len(self._refs), timeout=0)
        for ref in set(self._refs) - set(finished):  # cancelling a finished task races its reply in Ray
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished, or not a task (placement)
                pass

    def _release_group(self) -> None:
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001
                pass
            self._pg = None

    def cancel(self) -> None:
        if self._outcome is not None:
            return
        self._cancelled = True
        self._stop_tasks()
        self._end_try("cancelled", StepOutcome(ok=False, error="cancelled", infrastructure=True))

    # -- the StepHandle protocol -----------------------------------------------------------
    def done(self) -> bool:
        return self.poll()

    def outcome(self) -> StepOutcome:
        while not self.poll():
            self.runner.wait([self], timeout=1.0)
        assert self._outcome is not None
        return self._outcome
