"""RetryingStore and FaultyStore: backoff, budgets, permanent errors, and writes whose answer was lost."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from executor.engine.store import StoreError, TransientStoreError, Versioned
from tests.store.faulty import FaultyStore
from executor.engine.store.memory import MemoryStore
from executor.engine.store.retry import RetryCounts, RetryingStore, RetryPolicy
from tests.store import cas_counter


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


class Scripted:
    """Wraps a store; the next calls of one operation fail as scripted ('before' / 'after' / StoreError)."""

    def __init__(self, inner, operation: str, script: list):
        self.inner, self.operation, self.script, self.calls = inner, operation, list(script), 0
        self.root = inner.root

    def __getattr__(self, name):
        method = getattr(self.inner, name)
        if name != self.operation:
            return method

        def call(*args):
            self.calls += 1
            step = self.script.pop(0) if self.script else None
            if isinstance(step, Exception):
                raise step
            if step == "before":
                raise TransientStoreError("scripted: connection reset before the request")
            result = method(*args)
            if step == "after":
                raise TransientStoreError("scripted: timeout after the write landed")
            return result

        return call


def memory() -> MemoryStore:
    return MemoryStore(f"memory://retry-{uuid.uuid4().hex[:8]}")


def retrying(inner, **policy) -> tuple[RetryingStore, FakeTime]:
    time = FakeTime()
    return RetryingStore(inner, RetryPolicy(**policy), sleep=time.sleep, clock=time.clock,
                         rng=random.Random(0)), time


def test_transient_failures_are_retried_with_growing_jittered_backoff():
    inner = Scripted(memory(), "read", ["before"] * 4)
    store, time = retrying(inner, first_delay_s=0.1, multiplier=2, max_delay_s=10)
    assert store.read("k") is None
    assert inner.calls == 5 and store.counts == RetryCounts(retries=4)  # and nothing else counted
    assert repr(store.counts).startswith("RetryCounts(retries=4, gave_up=0")  # as a log shows it
    for retry, slept in enumerate(time.sleeps, start=1):
        ceiling = 0.1 * 2 ** (retry - 1)
        assert ceiling / 2 <= slept <= ceiling
    assert time.sleeps == sorted(time.sleeps)


def test_backoff_is_capped_at_max_delay():
    policy = RetryPolicy(first_delay_s=1, multiplier=10, max_delay_s=3)
    assert 0.5 <= policy.delay(1, random.Random(0)) <= 1
    assert all(1.5 <= policy.delay(retry, random.Random(retry)) <= 3 for retry in range(2, 40))


def test_gives_up_after_max_attempts_naming_operation_key_and_last_error():
    inner = Scripted(memory(), "read", ["before"] * 100)
    store, _ = retrying(inner, max_attempts=3)
    with pytest.raises(TransientStoreError, match=r"read 'some/key'.*after 3 attempts.*connection reset"):
        store.read("some/key")
    assert inner.calls == 3 and store.counts.gave_up == 1


def test_gives_up_when_the_total_time_budget_would_be_exceeded():
    inner = Scripted(memory(), "read", ["before"] * 100)
    store, time = retrying(inner, max_attempts=1000, first_delay_s=1, max_delay_s=4, total_budget_s=10)
    with pytest.raises(TransientStoreError, match="still failing"):
        store.read("k")
    assert sum(time.sleeps) <= 10


def test_permanent_errors_surface_at_once():
    inner = Scripted(memory(), "create_if_absent", [StoreError("bucket 'b' does not exist")])
    store, time = retrying(inner)
    with pytest.raises(StoreError, match="does not exist") as raised:
        store.create_if_absent("k", b"x")
    assert not isinstance(raised.value, TransientStoreError)
    assert inner.calls == 1 and time.sleeps == []


def test_create_whose_answer_was_lost_is_recognised_as_ours():
    inner = Scripted(memory(), "create_if_absent", ["after"])
    store, _ = retrying(inner)
    generation = store.create_if_absent("k", b"owner=me seq=1")
    assert generation is not None and store.read("k") == Versioned(b"owner=me seq=1", generation)
    assert store.counts.writes_confirmed_by_reread == 1


def test_replace_whose_answer_was_lost_is_recognised_as_ours():
    base = memory()
    first = base.create_if_absent("k", b"seq=1")
    store, _ = retrying(Scripted(base, "replace_if_generation", ["after", "after"]))
    generation = store.replace_if_generation("k", b"seq=2", first)
    assert generation is not None and store.read("k") == Versioned(b"seq=2", generation)


def test_a_race_really_lost_during_retries_still_reports_none():
    base = memory()
    first = base.create_if_absent("k", b"seq=1")

    class OtherWriterWins(Scripted):
        def __getattr__(self, name):
            if name == "replace_if_generation" and self.calls == 0:
                base.replace_if_generation("k", b"other writer", first)
            return super().__getattr__(name)

    store, _ = retrying(OtherWriterWins(base, "replace_if_generation", ["before"]))
    assert store.replace_if_generation("k", b"seq=2", first) is None
    assert store.read("k").data == b"other writer"
    assert store.counts.writes_lost_after_retry == 1


def test_a_first_attempt_that_loses_does_not_reread():
    base = memory()
    base.create_if_absent("k", b"theirs")
    store, _ = retrying(base)
    assert store.create_if_absent("k", b"mine") is None
    stale = base.read("k").generation
    base.replace_if_generation("k", b"theirs again", stale)
    assert store.replace_if_generation("k", b"mine", stale) is None
    assert store.counts.writes_confirmed_by_reread == store.counts.writes_lost_after_retry == 0


def test_a_retried_write_that_answers_is_taken_as_it_answered_without_a_reread():
    base = memory()
    store, _ = retrying(Scripted(base, "create_if_absent", ["before"]))
    first = store.create_if_absent("k", b"seq=1")
    store.inner = Scripted(base, "replace_if_generation", ["before"])
    assert store.replace_if_generation("k", b"seq=2", first) == base.read("k").generation
    assert store.counts.retries == 2 and store.counts.writes_confirmed_by_reread == 0


def test_faulty_store_is_seeded_and_faults_after_the_call_take_effect():
    def run(seed):
        store = FaultyStore(memory(), failure_rate=0.5, after_fraction=0.5, seed=seed)
        outcomes = []
        for i in range(40):
            try:
                store.create_if_absent(f"k{i}", b"x")
                outcomes.append("ok")
            except TransientStoreError as e:
                landed = store.inner.read(f"k{i}") is not None
                outcomes.append(("after" in str(e), landed))
        return outcomes, store.counts

    outcomes, counts = run(7)
    assert outcomes == run(7)[0]
    assert counts.before > 0 and counts.after > 0
    assert all(after == landed for after, landed in (o for o in outcomes if o != "ok"))


def test_faulty_store_rejects_unknown_operations():
    with pytest.raises(ValueError, match="unknown"):
        FaultyStore(memory(), operations=frozenset({"raed"}))


def faulty_retrying(store, seed: int, failure_rate: float = 0.3) -> tuple[RetryingStore, FaultyStore]:
    faulty = FaultyStore(store, failure_rate=failure_rate, after_fraction=0.5, seed=seed)
    return RetryingStore(faulty, RetryPolicy(max_attempts=30), sleep=lambda s: None), faulty


def test_single_writer_through_faults_counts_exactly_and_retrying_store_resolves_every_lost_answer(store):
    retrying_store, faulty = faulty_retrying(store, seed=1)
    result = cas_counter.increment(retrying_store, "counter", "only-writer", 30)
    assert cas_counter.load(store, "counter")["count"] == 30
    assert faulty.counts.after > 0
    assert retrying_store.counts.writes_confirmed_by_reread > 0
    # With one writer nothing overwrites a landed write, so the store resolved every ambiguity:
    assert result["won"] == 30 and result["unknown"] == 0 and result["lost"] == 0


def test_concurrent_writers_through_faults_count_exactly(store, store_location):
    threads, rounds = 4, (3 if store_location.backend == "s3" else 6)
    results = []
    stores = [faulty_retrying(store, seed=i) for i in range(threads)]

    def writer(i):
        results.append(cas_counter.increment(stores[i][0], "counter", f"w{i}", rounds))

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    state = cas_counter.load(store, "counter")
    assert state["count"] == threads * rounds
    assert state["last"] == {f"w{i}": rounds for i in range(threads)}
    assert sum(f.counts.after for _, f in stores) > 0


def test_the_default_policy_is_the_readmes_eight_attempts_within_sixty_seconds():
    """README: object-store calls are retried up to 8 attempts within 60 s per call."""
    inner = Scripted(memory(), "read", ["before"] * 100)
    store, _ = retrying(inner)
    with pytest.raises(TransientStoreError, match=r"after 8 attempts.*policy: 8 attempts, 60s"):
        store.read("k")
    assert inner.calls == 8

    class Hanging:  # each call hangs 14.84 s, then times out: four calls and their backoff pass 60 s
        root = "memory://hanging"

        def read(self, key):
            time.now += 14.84
            raise TransientStoreError("timed out")

    time = FakeTime()
    store = RetryingStore(Hanging(), RetryPolicy(), sleep=time.sleep, clock=time.clock, rng=random.Random(0))
    with pytest.raises(TransientStoreError, match="still failing after 4 attempts"):
        store.read("k")
    assert 59 < time.now <= 60  # gave up at once rather than sleep past the budget


def test_listing_and_deleting_are_retried_too_and_name_what_they_were_doing():
    base = memory()
    base.create_if_absent("runs/a.json", b"{}")
    base.create_if_absent("steps/b/status.json", b"{}")
    listing = Scripted(base, "list_generations", ["before"])
    store, _ = retrying(listing)
    assert store.list_generations("runs/", ".json") == base.list_generations("runs/", ".json") != {}
    assert listing.calls == 2 and store.counts.retries == 1

    deleting = Scripted(base, "delete", ["before"])
    store, _ = retrying(deleting)
    store.delete("runs/a.json")
    assert deleting.calls == 2 and base.read("runs/a.json") is None

    store, _ = retrying(Scripted(base, "list_generations", ["before"] * 10), max_attempts=2)
    with pytest.raises(TransientStoreError, match=r"list_generations 'steps/\*/status.json' under memory://"):
        store.list_generations("steps/", "/status.json")


def test_the_shared_default_policy_cannot_be_changed_through_one_store():
    """Every RetryingStore built without a policy shares one RetryPolicy (a default argument):
    changing it through one store would change every other store's retries."""
    one, other = RetryingStore(memory()), RetryingStore(memory())
    assert one.policy is other.policy
    with pytest.raises(AttributeError):
        one.policy.max_attempts = 1  # type: ignore[misc]
    assert other.policy.max_attempts == 8
    assert RetryingStore(memory(), policy=RetryPolicy(max_attempts=2)).policy.max_attempts == 2  # by name too


def test_a_policy_needs_at_least_one_attempt_and_one_attempt_means_no_retry():
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=rf"RetryPolicy\.max_attempts must be a whole number at least 1 .*got {bad}"):
            RetryPolicy(max_attempts=bad)
    inner = Scripted(memory(), "read", ["before"] * 10)
    store, time = retrying(inner, max_attempts=1)
    with pytest.raises(TransientStoreError, match="after 1 attempts"):
        store.read("k")
    assert inner.calls == 1 and time.sleeps == []


def test_many_attempts_are_counted_exactly():
    """Attempts beyond 256 (ints Python does not cache) still stop at max_attempts."""
    inner = Scripted(memory(), "read", ["before"] * 400)
    store, _ = retrying(inner, max_attempts=300, first_delay_s=0.001, max_delay_s=0.001, total_budget_s=1e9)
    with pytest.raises(TransientStoreError, match="after 300 attempts"):
        store.read("k")
    assert inner.calls == 300


class HighestJitter(random.Random):
    """Jitter at its top: every wait is the whole ceiling."""

    def uniform(self, a, b):
        return b


def test_the_default_backoff_is_the_docs_doubling_from_a_tenth_of_a_second_to_five():
    """docs/storage.md: a wait of 0.1 s, doubling with each retry up to 5 s, half of each wait random."""
    inner = Scripted(memory(), "read", ["before"] * 100)
    time = FakeTime()
    store = RetryingStore(inner, sleep=time.sleep, clock=time.clock, rng=HighestJitter())
    with pytest.raises(TransientStoreError, match="after 8 attempts"):
        store.read("k")
    assert time.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0])
    lowest = [RetryPolicy().delay(retry, random.Random(0)) for retry in range(1, 8)]
    assert all(c / 2 <= d <= c for c, d in zip([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0], lowest))


def test_a_retry_that_ends_exactly_at_the_budget_is_still_made():
    """The budget bounds the time a call may take: a backoff that reaches it exactly is within it."""
    inner = Scripted(memory(), "read", ["before", "before"])
    time = FakeTime()
    store = RetryingStore(inner, RetryPolicy(first_delay_s=2, multiplier=1, max_delay_s=2, total_budget_s=4),
                          sleep=time.sleep, clock=time.clock, rng=HighestJitter())
    assert store.read("k") is None  # sleeps 2 s, then 2 s more: exactly the 4 s budget
    assert time.sleeps == [2, 2] and inner.calls == 3
