"""Work done once across runners: a claim is a lease on a small status object (executor.engine.run.lease).

`claim_once(url, find, make)` is what a data step calls for one piece of work that other runners may
want at the same time (a shard result two runs of a growing corpus both need). The claim at `url`
is a status object written by the lease machinery the executor uses for steps: taken by
`create_if_absent` (or a CAS over a stale, failed or vanished holder's generation), renewed by the
heartbeat while `make` runs, and ended by a fenced CAS to SUCCESS that records where the result was
put. A runner that finds the claim held waits, on its own clock, until the holder ends (then it asks
`find` for the result) or goes silent for the TTL (then it takes the claim over). So each piece is
made once while its maker is alive; a result is published by its maker (an atomic write, or a
checked copy) before the claim says SUCCESS, so a waiting runner never takes a half-written one.
A claim taken inside a step names the step's lease (`holder`: the URL of its status object, with
the owner's run id and the attempt it read there, in the RUNNING claim's `alias_of`). Once that
status shows another attempt or owner, or has ended or vanished, the claim's maker is provably gone
(a step's tasks die with its lease, and a restarted run takes the step over first), so the claim is
taken over at once by CAS instead of after the TTL. A live maker's step lease keeps its attempt and
owner, so it is never taken over early; a takeover is fenced by the claim's generation either way.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from executor.core.errors import StatusError
from executor.core.record import Owner, State, Status, parse_status
from executor.engine.prefix import location
from executor.engine.run.lease import LeaseKeeper, LeaseSettings, StalenessWatch
from executor.engine.store import StoreError


@dataclass(frozen=True)
class ClaimSettings:
    """A claim's lease TTL and heartbeat (as a step's lease), and how often a waiting runner re-reads."""

    ttl_s: float = 60.0
    heartbeat_s: float = 10.0
    poll_s: float = 0.2


def claim_once(url: str, find: Callable[[str | None], Any], make: Callable[[], tuple[Any, str]], *,
               label: str = "", settings: ClaimSettings = ClaimSettings(), holder: str | None = None,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
               ) -> tuple[Any, bool]:
    """(result, made here): `find(where)` when the work is done (`where`: what its maker recorded,
    None when nobody claimed it yet), else `make()` under the claim at `url`. `find` returns the
    result or None (not there, or damaged: then the work is claimed and made again); `make` returns
    (result, where) after publishing the result. The claim lives in the store of `url`'s folder,
    opened with the step's storage options. `holder`: the status object of the step lease this runs
    under (its claim is taken over at once once that lease has moved on; see the module's text)."""
    folder, _, key = url.rstrip("/").rpartition("/")
    store = location.open_store(folder, location.current_storage())
    keeper = LeaseKeeper(store, LeaseSettings(settings.ttl_s, settings.heartbeat_s), clock)
    watch = StalenessWatch(settings.ttl_s, clock)
    gone = _HolderCheck(settings.heartbeat_s, clock)
    while True:
        current = store.read(key)
        status = _parsed(current.data, url) if current is not None else None
        if (status is not None and status.state is State.RUNNING and not watch.is_stale(key, current.generation)
                and not gone(status, current.generation)):
            sleep(settings.poll_s)  # held by a live runner: wait for it to end
            continue
        if status is None or status.state is not State.RUNNING:
            where = (status.alias_of or {}).get("where") if status is not None and status.state is State.SUCCESS else None
            found = find(where)
            if found is not None:
                return found, False
        lease = keeper.acquire(key, _claiming(status, key, label, _lease_of(holder)), current)
        if lease is not None:
            return _make_under(keeper, lease, make), True


def _parsed(data: bytes, where: str) -> Status | None:
    try:
        return parse_status(data, where)
    except StatusError:  # a damaged claim is taken over by CAS, like a failed one
        return None


def _claiming(before: Status | None, key: str, label: str, under: dict[str, str] | None) -> Status:
    now = time.time()
    owner = Owner(run_id=f"claim-{uuid.uuid4().hex[:12]}", host=socket.gethostname(), pid=os.getpid(), user="")
    return Status(state=State.RUNNING, digest=key.removesuffix(".json"), step_id=label or key,
                  seq=before.seq + 1 if before else 0, attempt=before.attempt + 1 if before else 1,
                  owner=owner, written_at=now, started_at=now, alias_of=under)


def _read_status(url: str) -> Status | None:
    folder, _, key = url.rpartition("/")
    current = location.open_store(folder, location.current_storage()).read(key)
    return _parsed(current.data, url) if current is not None else None


def _lease_of(holder: str | None) -> dict[str, str] | None:
    """What a new claim records of the step lease it is taken under: the status URL, the owner's
    run id and the attempt; None outside a running step (then only the TTL ends a silent claim)."""
    status = _read_status(holder) if holder else None
    if status is None or status.state is not State.RUNNING or status.owner is None:
        return None
    return {"lease": holder, "run_id": status.owner.run_id, "attempt": str(status.attempt)}


class _HolderCheck:
    """Whether a RUNNING claim's step lease has moved on (its maker is gone): read on each new
    generation of the claim, and at most once a heartbeat interval while it stays the same."""

    def __init__(self, every_s: float, clock: Callable[[], float]):
        self.every_s, self.clock = every_s, clock
        self.checked: tuple[str, float] | None = None  # (claim generation, when)

    def __call__(self, claim: Status, generation: str) -> bool:
        under = claim.alias_of or {}
        if "lease" not in under:
            return False
        now = self.clock()
        if self.checked is not None and self.checked[0] == generation and now - self.checked[1] < self.every_s:
            return False
        self.checked = (generation, now)
        step = _read_status(under["lease"])
        return (step is None or step.state is not State.RUNNING or step.owner is None
                or step.owner.run_id != under.get("run_id") or str(step.attempt) != under.get("attempt"))


def _make_under(keeper: LeaseKeeper, lease: Any, make: Callable[[], tuple[Any, str]]) -> Any:
    keeper.start()
    try:
        try:
            result, where = make()
        except BaseException as e:
            keeper.finish(lease, lease.status.next(state=State.FAILED, error=f"{type(e).__name__}: {e}"[:500],
                                                   written_at=time.time()))
            raise
        try:  # fenced: a runner that took the claim over meanwhile made the result too and records its own
            keeper.finish(lease, lease.status.next(state=State.SUCCESS, alias_of={"where": where},
                                                   written_at=time.time()))
        except StoreError:  # the result is published; the claim goes stale and a later runner finds it
            pass
        return result
    finally:
        keeper.stop()
