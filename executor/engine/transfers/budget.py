"""One transfer budget per run (`--transfer-budget-gb`, execution-only, default 10): what a run moves between
locations, counted together.

Three kinds of bytes count: mirrored inputs copied under the prefix (executor.engine.transfers.mirror), cross-region
reads of steps that will run (executor.engine.transfers.regions) and cache copies (executor.engine.transfers.cache_from). The
first two are needed for the steps to run at all, so the plan reserves them first and a cache copy gets
what is left (over it, the step runs here instead; its reason says so). Before anything runs, a run whose
needed transfers exceed the budget is refused with every amount named; a cross-region read of unknown size
counts as over any finite budget. While the run goes on, a transfer the plan did not foresee (a mirrored
input copied for a step whose cache copy fell back to running, or for a copy taken over from a runner
that went silent) is counted on the run's TransferLedger and refused, with the sizes, past the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from executor.core.errors import ExecutorError
from executor.core.plan import Action, Plan
from executor.engine.transfers.mirror import human_bytes

GB = 10**9
FLAG = "--transfer-budget-gb"


def copy_bytes(plan: Plan) -> int:
    """The bytes the plan's cache copies move (the first source of each)."""
    return sum(d.sources[0].bytes for d in plan.decisions.values() if d.action == Action.COPY and d.sources)


def mirror_bytes(plan: Plan) -> int:
    return sum(m.bytes_to_copy for m in plan.mirrors.values())


@dataclass(frozen=True)
class Transfers:
    """What a run would move, by kind, in bytes (cross-region reads of unknown size listed apart)."""

    mirrors: int
    copies: int
    reads: int
    unknown_reads: tuple[Any, ...] = ()  # regions.CrossRegionRead whose size could not be listed

    @property
    def total(self) -> int:
        return self.mirrors + self.copies + self.reads

    def describe(self, plan: Plan, reads: Sequence[Any]) -> str:
        parts = []
        if self.mirrors:
            names = ", ".join(m.logical for m in plan.mirrors.values() if m.bytes_to_copy)
            parts.append(f"mirrored inputs {human_bytes(self.mirrors)} ({names})")
        if self.reads:
            parts.append(f"cross-region reads {human_bytes(self.reads)} ({', '.join(sorted({r.step for r in reads}))})")
        if self.copies:
            parts.append(f"cache copies {human_bytes(self.copies)}")
        return "; ".join(parts)


def check_transfer_budget(plan: Plan, reads: Sequence[Any], budget_gb: float) -> Transfers:
    """Refuse, before anything runs, a run whose transfers exceed the budget, naming each amount and the fix."""
    known = [r for r in reads if r.bytes is not None]
    transfers = Transfers(mirror_bytes(plan), copy_bytes(plan), sum(r.bytes for r in known),
                          tuple(r for r in reads if r.bytes is None))
    if transfers.unknown_reads and budget_gb != float("inf"):  # an unknown size is over any finite budget
        which = "; ".join(f"{r.step} reads {r.url} from {r.location} ({r.size_problem})"
                          for r in transfers.unknown_reads)
        raise ExecutorError(f"cross-region reads of unknown size: {which}; nothing was started. Copy the inputs "
                            f"to the prefix's location, or allow reads of unknown size with {FLAG} inf")
    if transfers.total > budget_gb * GB:
        raise ExecutorError(f"transfers of {human_bytes(transfers.total)} exceed the budget of {budget_gb:g} GB "
                            f"({transfers.describe(plan, known)}); nothing was started. Copy the inputs to the "
                            f"prefix's location, or raise the budget with {FLAG} "
                            f"{max(transfers.total / GB * 1.1, 0.01):.2g}")
    return transfers


@dataclass
class TransferLedger:
    """One run's transfer budget as the run spends it: what the plan counted, then each unforeseen transfer."""

    budget_gb: float = float("inf")
    spent: int = 0

    def charge(self, what: str, n: int) -> str | None:
        """Count `n` more bytes for `what`; None if within the budget, else why not (then nothing is counted)."""
        if self.spent + n > self.budget_gb * GB:
            return (f"{what} ({human_bytes(n)}) would take the transfer budget past {self.budget_gb:g} GB "
                    f"({human_bytes(self.spent)} already counted in this run); raise it with {FLAG} "
                    f"{max((self.spent + n) / GB * 1.1, 0.01):.2g}")
        self.spent += n
        return None
