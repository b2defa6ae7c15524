"""A run's lease watch on an injected clock, for tests of waits and takeovers (no real TTL waited out).

`quick_takeovers(monkeypatch)` makes every run the test starts (executor.run, executor.cli.run) look at
other runners' leases through a `StalenessWatch` whose clock reads `tick_s` later at each look, and poll
every `poll_s` instead of the default 0.5 s: a holder that never renews is taken over after TTL / tick_s
re-reads, not after TTL seconds. Everything else keeps its real clock: this run's own leases, their
heartbeat, the inline child's silence limit. What the tests prove is unchanged: the wait is announced,
the silent holder is taken over once its status has not moved for the TTL (as the watch measures it),
and a holder that renews (a new generation) restarts that count.
"""

from __future__ import annotations

import functools
import itertools

import pytest


def quick_takeovers(monkeypatch: pytest.MonkeyPatch, tick_s: float = 1.0, poll_s: float = 0.05) -> None:
    from executor.engine.run import execute as execute_module
    from executor.engine.run import lease as lease_module

    readings = itertools.count(0.0, tick_s)
    monkeypatch.setattr(lease_module, "StalenessWatch",
                        functools.partial(lease_module.StalenessWatch, clock=lambda: next(readings)))
    monkeypatch.setattr(execute_module, "RunContext", functools.partial(execute_module.RunContext, poll_s=poll_s))
