"""Injected storage faults under RetryingStore (in-process run), bad EXECUTOR_STORAGE_OPTIONS,
and a corrupt status file on an object store: exit 2, untouched, repairable."""

from __future__ import annotations

import json
import os

import pytest

from executor import cli
from executor.__main__ import main as tools_main
from executor.engine.prefix import location
from executor.engine.store.retry import RetryingStore, RetryPolicy
from tests.store.faulty import FaultyStore
from tests.leases import dag_experiment
from tests.leases.harness import events, make_backend

N_FAULT_STEPS = 30


def run_dag(backend, *args: str, environ: dict[str, str] | None = None) -> int:
    env = dict(environ or {})
    if backend.options:
        env["EXECUTOR_STORAGE_OPTIONS"] = json.dumps(backend.options)
    return cli.run(lambda o: dag_experiment.build(o.steps), "faults", config=dag_experiment.DagOptions(),
                   argv=["--prefix", backend.prefix, "--runner", "inline", "--lease-ttl", "6",
                         "--heartbeat-interval", "1", *args],
                   environ=env, main_file=dag_experiment.__file__, reporter=dag_experiment.EvidenceReporter())


# The production policy's attempts and budget, with backoffs a tenth as long: the run's ~400 store
# calls meet ~100 faults, each retried after 0.05-0.1 s of the real clock with the production policy
# (most of this test's time, issue 46); what is proven (every fault retried, every step committed
# once) does not depend on how long a retry waits.
SHORT_BACKOFF = RetryPolicy(first_delay_s=RetryPolicy.first_delay_s / 10, max_delay_s=RetryPolicy.max_delay_s / 10)


def inject_faults(monkeypatch, *, failure_rate: float, seed: int) -> list[FaultyStore]:
    """Every coordination store the run opens is wrapped: FaultyStore (seeded retryable errors, half
    of them after the call took effect) under RetryingStore, as production wraps an object store
    (its policy's backoffs shortened: SHORT_BACKOFF). The product's opener is untouched; the
    FaultyStores made are returned for their counts."""
    made: list[FaultyStore] = []
    open_raw = location.open_raw_store

    def faulty_opener(prefix, options=None):
        made.append(FaultyStore(open_raw(prefix, options), failure_rate=failure_rate, seed=seed))
        return RetryingStore(made[-1], SHORT_BACKOFF)

    monkeypatch.setattr(location, "open_raw_store", faulty_opener)
    return made


@pytest.mark.parametrize("backend_name", ["local"])  # also passes with "gcs" (+14 s); FaultyStore is store-agnostic
def test_injected_faults_are_retried_and_every_step_commits_once(backend_name, sidefx, tmp_path, request,
                                                              monkeypatch):
    backend = make_backend(backend_name, tmp_path, request)
    monkeypatch.setenv("DAG_SIDEFX", str(sidefx))
    monkeypatch.setenv("DAG_SLEEP_S", "0.01")
    if backend.options:
        monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(backend.options))
    made = inject_faults(monkeypatch, failure_rate=0.25, seed=11)
    assert run_dag(backend, "--steps", str(N_FAULT_STEPS)) == 0
    execution_store = made[-1]  # the store the run opened
    counts = execution_store.counts
    print(f"[{backend.name}] {counts.calls} store calls in the run, faults injected: "
          f"{counts.before} before the call, {counts.after} after it took effect")
    assert counts.before > 5 and counts.after > 5

    names = {s.name.split("/")[-1] for s in dag_experiment.build(N_FAULT_STEPS)}
    ev = events(sidefx)
    assert {s: len(ev["commit"].get(s, [])) for s in names} == {s: 1 for s in names}, "commit"
    # Started once, unless the run reported the step's lease lost while its function still ran: a
    # holder silent past half the TTL (renewals backing off, a starved process) stops its task, as
    # the design says, and the step starts again; it still commits once. A lease that lapsed after
    # the function ended is reclaimed, never a second start (issue 51).
    lost = {s: len(ev["lost"].get(s, [])) for s in names}
    print(f"[{backend.name}] leases reported lost: {sum(lost.values())} {dict((s, n) for s, n in lost.items() if n)}")
    for kind in ("start", "ret"):  # a task stopped at once may not have reached its marker
        counts = {s: len(ev[kind].get(s, [])) for s in names}
        assert {s: n for s, n in counts.items() if not 1 <= n <= 1 + lost[s]} == {}, (kind, lost)
        assert {s: counts[s] for s in names if not lost[s]} == {s: 1 for s in names if not lost[s]}, kind
    assert not ev["violation"]
    statuses = backend.statuses()
    assert {(st["state"], st["attempt"] - lost[s]) for s, st in statuses.items()} == {("SUCCESS", 1)}
    assert len(statuses) == len(names)
    inject_faults(monkeypatch, failure_rate=0.25, seed=12)  # a re-run under faults finds everything done
    assert run_dag(backend, "--steps", str(N_FAULT_STEPS)) == 0
    assert sum(map(len, events(sidefx)["start"].values())) == sum(map(len, ev["start"].values()))  # none again


@pytest.mark.parametrize("value", ["{not json", "[1, 2]", '"text"'])
def test_malformed_storage_options_is_a_usage_error(value, tmp_path, capsys):
    backend = make_backend("local", tmp_path, None)
    assert run_dag(backend, environ={"EXECUTOR_STORAGE_OPTIONS": value}) == 2
    assert "EXECUTOR_STORAGE_OPTIONS must be a JSON object" in capsys.readouterr().err
    assert not (tmp_path / "prefix").exists()  # nothing ran


def test_corrupt_status_on_gcs_is_refused_then_repaired(sidefx, tmp_path, request, monkeypatch, capsys):
    """The runs and `repair` are the command line in this process (cli.run, executor.__main__.main):
    four interpreter starts fewer than as subprocesses (issue 46); exit codes and output are the same."""
    backend = make_backend("gcs", tmp_path, request)
    monkeypatch.setenv("DAG_SIDEFX", str(sidefx))
    monkeypatch.setenv("DAG_SLEEP_S", "0.01")
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(backend.options))  # the steps' own reads
    assert run_dag(backend, "--steps", "3") == 0, capsys.readouterr()
    fs = backend.fs()
    (status_path,) = fs.glob(f"{backend.prefix}/dag/n01-*/.executor/status.json")
    status_url = f"gs://{status_path}"
    truncated = fs.cat_file(status_path)[:25]  # a truncated SUCCESS
    fs.pipe_file(status_path, truncated)

    capsys.readouterr()
    assert run_dag(backend, "--steps", "3") == 2
    out = "".join(capsys.readouterr())
    assert "corrupt status file" in out and "n01" in out and "repair" in out, out[-2000:]
    assert backend.fs().cat_file(status_path) == truncated  # never silently overwritten

    assert tools_main(["repair", "--delete-status", status_url, "--storage-options", json.dumps(backend.options)]) == 0
    assert "deleted" in capsys.readouterr().out
    assert run_dag(backend, "--steps", "3") == 0, capsys.readouterr()
    status = json.loads(backend.fs().cat_file(status_path))
    assert status["state"] == "SUCCESS" and status["owner"]["pid"] == os.getpid()
    assert len(events(sidefx)["commit"]["n01"]) == 2  # first run, then the repaired re-run
