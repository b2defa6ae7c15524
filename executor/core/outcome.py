"""A step's state in three vocabularies, one per question, and the one mapping between them.

- `State` (core/record.py): what status.json stores: RUNNING, SUCCESS, FAILED. A read that finds
  no status, or one that does not parse, is `Absent` (NO STATUS, CORRUPT), never a made-up State.
- `Action` (core/plan.py): what the plan decides: run, copy, skip, wait, blocked, stop.
- `Outcome` (here): where a step stands in a run and how it ended: succeeded, failed, blocked, or
  pending (a run that stopped before reaching it); running (ours) and watching (another runner's
  lease) while the run goes on. These strings are stored in run files and returned as
  `StepReport.status`; they do not change without a run-file schema bump.

Every module that turns one vocabulary into another calls a function of this one.
"""

from __future__ import annotations

import enum

from executor.core.plan import Action
from executor.core.record import State


class Outcome(enum.StrEnum):  # str() and f-strings give the value: "succeeded"
    PENDING = "pending"  # not started: waiting for its dependencies or a lease (or the run stopped first)
    RUNNING = "running"  # ours: leased and submitted
    WATCHING = "watching"  # another runner holds its lease
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"  # a dependency failed or is blocked

    @property
    def ended(self) -> bool:
        return self in _ENDED

    @property
    def unsuccessful(self) -> bool:
        """Failed or blocked: what makes a run's exit code 1."""
        return self in (Outcome.FAILED, Outcome.BLOCKED)


_ENDED = frozenset({Outcome.SUCCEEDED, Outcome.FAILED, Outcome.BLOCKED})

_BEFORE_RUNNING = {Action.RUN: Outcome.PENDING, Action.WAIT: Outcome.PENDING, Action.SKIP: Outcome.SUCCEEDED,
                   Action.BLOCKED: Outcome.BLOCKED, Action.STOP: Outcome.FAILED, Action.COPY: Outcome.PENDING}


def outcome_of_action(action: Action) -> Outcome:
    """Where a step the plan decided `action` for stands as a run starts; for skip, blocked and stop
    also how it ends (a run that needs no runner ends with exactly these)."""
    return _BEFORE_RUNNING[action]


_OF_STORED = {State.SUCCESS: Outcome.SUCCEEDED, State.FAILED: Outcome.FAILED, State.RUNNING: Outcome.WATCHING}


def outcome_of_state(state: State) -> Outcome:
    """What a status another runner wrote means for this run's step (RUNNING: we watch its lease)."""
    return _OF_STORED[state]


class Ending(enum.StrEnum):
    """How a run's end table names a step's end: its outcome, told apart by where it happened."""

    RAN = "ran"  # succeeded, run by this process
    SKIPPED = "skipped"  # succeeded earlier; the plan skipped it
    ELSEWHERE = "done elsewhere"  # succeeded, run by another runner while this run waited
    COPIED = "copied"  # succeeded: its output was copied from a --cache-from prefix and checked
    CUT_OFF = "cut off"  # succeeded without running: its inputs' outputs are the ones an earlier output consumed
    FAILED = "failed"
    BLOCKED = "blocked"
    INTERRUPTED = "interrupted"  # the run stopped before the step ended


def ending(outcome: Outcome, action: Action, ran_here: bool, cut_off: bool = False) -> Ending:
    """`cut_off`: this run committed the step as an early cutoff (executor.engine.run.cutoff)."""
    if outcome == Outcome.SUCCEEDED:
        if cut_off:
            return Ending.CUT_OFF
        if ran_here:
            return Ending.RAN
        return {Action.SKIP: Ending.SKIPPED, Action.COPY: Ending.COPIED}.get(action, Ending.ELSEWHERE)
    if outcome == Outcome.FAILED:
        return Ending.FAILED
    return Ending.BLOCKED if outcome == Outcome.BLOCKED else Ending.INTERRUPTED


__all__ = ["Ending", "Outcome", "ending", "outcome_of_action", "outcome_of_state"]
