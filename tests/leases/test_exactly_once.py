"""Eight executors race on one 30-step DAG: every step runs and commits exactly once, and
independent steps run at the same time in different processes (a global lock would fail this)."""

from __future__ import annotations

import itertools

from tests.leases.dag_experiment import build
from tests.leases.harness import Runner, events

N_RUNNERS = 8
# 30 steps (6 roots, fan-in and fan-out as in 50): eight runners of two slots each still contend for
# every ready step; 50 cost each runner 20 more steps of leases, polls and commits (issue 46).
N_STEPS = 30


def test_eight_runners_one_dag_exactly_once_and_concurrent(backend, sidefx, tmp_path):
    names = {s.name.split("/")[-1] for s in build(N_STEPS)}
    assert len(names) == N_STEPS
    runners = [Runner(backend, sidefx, tmp_path / f"runner{i}.log", "--steps", str(N_STEPS),
                      "--max-concurrent", "2", sleep_s=0.15) for i in range(N_RUNNERS)]
    codes = [r.wait(timeout=80) for r in runners]
    logs = "\n".join(f"--- {r.pid} rc={c}\n{r.output()[-1500:]}" for r, c in zip(runners, codes))
    assert codes == [0] * N_RUNNERS, logs

    ev = events(sidefx)
    assert set(ev["start"]) == names and set(ev["ret"]) == names and set(ev["commit"]) == names, logs
    for kind in ("start", "ret", "commit"):
        assert {s: len(v) for s, v in ev[kind].items() if len(v) != 1} == {}, f"{kind} not exactly once"
    assert not ev["violation"], dict(ev["violation"])

    statuses = backend.statuses()
    assert set(statuses) == names
    assert {s: (st["state"], st["attempt"]) for s, st in statuses.items()
            if (st["state"], st["attempt"]) != ("SUCCESS", 1)} == {}
    pids = {r.pid for r in runners}
    for step, status in statuses.items():  # the committer is the process that ran the function
        (ret,) = ev["ret"][step]
        (commit,) = ev["commit"][step]
        assert status["owner"]["pid"] == ret["runner_pid"] == commit["pid"] and ret["runner_pid"] in pids

    # Concurrency across processes: executions by different pids overlapping in time.
    runs = [e for v in ev["ret"].values() for e in v]
    executing_pids = {e["runner_pid"] for e in runs}
    overlaps = [(a["step"], b["step"]) for a, b in itertools.combinations(runs, 2)
                if a["runner_pid"] != b["runner_pid"] and a["start"] < b["end"] and b["start"] < a["end"]]
    print(f"[{backend.name}] {len(runs)} executions by {len(executing_pids)} processes; "
          f"{len(overlaps)} cross-process overlapping pairs")
    assert len(executing_pids) >= 2
    assert overlaps
