"""A lease the holder let lapse by its own silence, which nobody took over (issue 51).

The interleaving the fault test hit (`{'n06': 2} != {'n06': 1}`, the "start" markers): the step's
function ran to its end; the run loop's check before the record (`confirm`) waited behind a
renewal stuck in the store's backoff, then found the lease silent past half the TTL; the run loop
reported the lease lost, took its own RUNNING status back at once (it is this run's) and started
the function a second time, although no other runner had ever written the status. Here the same
interleaving is injected: a lease clock that jumps past half the TTL between the function's end
and the commit (as that renewal, or a starved process, made it), one in-process run on a
memory:// prefix (steps on threads), nothing else writing, no sleeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import executor
from executor import ExecutorStep, this_output_path
from executor.core.record import State, parse_status
from executor.engine.run import lease
from executor.engine.prefix import location
from executor.engine.run.lease import LeaseKeeper

TTL_S = 6.0
STARTS: dict[str, int] = {}  # token -> times the step's function began (steps run on threads here)
ENDED: set[str] = set()


class LeaseClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Counted:
    token: str
    output_path: Any


def counted(config: Counted) -> dict:
    STARTS[config.token] = STARTS.get(config.token, 0) + 1
    ENDED.add(config.token)
    return {"starts": STARTS[config.token]}


class LapseAfterTheEnd:
    """The run's store; the first read of a status after the function ended moves the lease clock
    past half the TTL: the holder was silent that long (a renewal backing off, a starved process)."""

    def __init__(self, inner, clock: LeaseClock, token: str):
        self.inner, self.clock, self.token, self.lapsed = inner, clock, token, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read(self, key):
        if self.token in ENDED and not self.lapsed and key.endswith("status.json"):
            self.lapsed = True
            self.clock.now += TTL_S / 2 + 1
        return self.inner.read(key)


def test_a_finished_step_whose_lease_lapsed_but_was_never_taken_is_committed_once(request, monkeypatch):
    token = request.node.name
    clock = LeaseClock()
    stores: list[LapseAfterTheEnd] = []
    open_raw = location.open_raw_store

    def opener(prefix, options=None):
        stores.append(LapseAfterTheEnd(open_raw(prefix, options), clock, token))
        return stores[-1]

    monkeypatch.setattr(location, "open_raw_store", opener)
    monkeypatch.setattr(lease, "LeaseKeeper", lambda store, settings: LeaseKeeper(store, settings, clock))
    step = ExecutorStep("counted", counted, Counted(token, this_output_path()))
    result = executor.run([step], prefix=f"memory://lapsed-{token}", runner="inline", lease_ttl=TTL_S,
                          heartbeat_interval=1)

    assert stores[-1].lapsed, "the lease clock never jumped: the test did not inject its interleaving"
    assert result.ok, result
    assert STARTS[token] == 1, f"the function started {STARTS[token]} times"
    [key] = stores[-1].list_generations("", "status.json")
    parsed = parse_status(stores[-1].inner.read(key).data, key)
    assert (parsed.state, parsed.attempt) == (State.SUCCESS, 1)
