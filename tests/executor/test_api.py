"""The Python API (executor.plan / run / materialize): results, exceptions, notebooks, threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import executor
from executor import ExecutorError, ExecutorStep, Options, StepFailed, output_path_of, this_output_path
from executor.core.record import State, parse_status
from executor.engine.events import StepStarted
from experiments import hello

REPO = Path(__file__).resolve().parents[2]


def inline(prefix: Path, **more) -> Options:
    return Options(prefix=str(prefix), runner="inline", **more)


def test_plan_writes_nothing_and_names_every_output(tmp_path):
    [summary] = hello.build(hello.HelloOptions())
    planned = executor.plan([summary], inline(tmp_path / "p"))
    assert [s.decision for s in planned.steps] == ["run"] * 5
    assert planned.output_path(summary) == str(tmp_path / "p" / planned.step(summary).step_id)
    assert planned.step("hello/words").reason == "new: no previous attempt"
    assert not (tmp_path / "p").exists()


def test_run_returns_paths_decisions_and_statuses_and_failures_are_results(tmp_path):
    [summary] = hello.build(hello.HelloOptions(fail_shout=True))
    result = executor.run([summary], inline(tmp_path))
    by_name = {s.name: s for s in result.steps}
    assert {n: s.status for n, s in by_name.items()} == {
        "hello/words": "succeeded", "hello/count": "succeeded", "hello/greeting": "succeeded",
        "hello/shout": "failed", "hello/summary": "blocked"}
    assert "failing on purpose" in by_name["hello/shout"].error
    assert result.exit_code == 1 and not result.ok
    assert [s.name for s in result.failed] == ["hello/shout", "hello/summary"]
    for s in result.steps:  # every path is where the status really is
        on_disk = Path(s.output_path, ".executor", "status.json")
        assert on_disk.exists() == (s.status != "blocked")
    with pytest.raises(StepFailed, match="hello/shout failed: RuntimeError: failing on purpose") as caught:
        result.raise_on_failure()
    assert caught.value.result is result
    with pytest.raises(StepFailed, match="hello/summary: blocked"):
        executor.materialize(summary, inline(tmp_path), force_failed=False)
    left = executor.run([summary], inline(tmp_path), force_failed=False)  # nothing may run: no runner
    assert left.run_file is None and left.exit_code == 1
    assert {s.name: (s.decision, s.status) for s in left.steps} == {
        "hello/words": ("skip", "succeeded"), "hello/count": ("skip", "succeeded"),
        "hello/greeting": ("skip", "succeeded"), "hello/shout": ("stop", "failed"),
        "hello/summary": ("blocked", "blocked")}


def test_keyword_options_and_materialize(tmp_path):
    [summary] = hello.build(hello.HelloOptions())
    path = executor.materialize(summary, prefix=str(tmp_path), runner="inline")
    assert Path(path, "summary.txt").read_text().startswith("HELLO!")
    again = executor.run([summary], prefix=str(tmp_path), runner="inline")
    assert {s.decision for s in again.steps} == {"skip"} and again.ok and again.run_file is None
    assert again.output_path("hello/summary") == path


def test_usage_errors_raise_instead_of_exiting(tmp_path):
    with pytest.raises(ExecutorError, match="no steps given"):
        executor.run([], inline(tmp_path))
    [summary] = hello.build(hello.HelloOptions())
    with pytest.raises(ExecutorError, match="not a valid regular expression"):
        executor.plan([summary], inline(tmp_path), only="(")
    with pytest.raises(ExecutorError, match="memory:// prefixes live in this process only"):
        executor.run([summary], Options(prefix="memory://api-test", runner="ray"))
    with pytest.raises(TypeError):
        executor.run([summary], inline(tmp_path), no_such_option=1)
    assert not (tmp_path / "runs").exists()


def test_a_run_from_a_non_main_thread_on_ray_leaves_nothing_behind(tmp_path, ray_local):
    """In a subprocess driver: from a worker thread, join the session's Ray cluster, run, disconnect.

    Joining (not starting) keeps the test fast on a loaded machine; a driver that connected must
    be disconnected on return, and no lease-heartbeat or step thread may survive the call.
    """
    address = ray_local.get_runtime_context().gcs_address
    script = f"""
import json, threading, ray, executor
from experiments import hello
out = {{}}
def work():
    try:
        [summary] = hello.build(hello.HelloOptions())
        result = executor.run([summary], prefix={str(tmp_path)!r}, runner="ray", ray_address={address!r})
        out["statuses"] = sorted({{s.status for s in result.steps}})
    except BaseException as e:
        out["error"] = repr(e)
t = threading.Thread(target=work, name="not-main"); t.start(); t.join()
out["ray_initialized"] = ray.is_initialized()
out["threads"] = sorted(x.name for x in threading.enumerate() if x is not threading.main_thread())
print(json.dumps(out))
"""
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "EXECUTOR_SHIP_CODE": "0",
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen.get("error") is None and seen["statuses"] == ["succeeded"]
    assert seen["ray_initialized"] is False
    assert not any(name.startswith(("lease-heartbeat", "step")) for name in seen["threads"]), seen["threads"]
    statuses = [parse_status(p.read_bytes(), str(p)) for p in tmp_path.glob("hello/*/.executor/status.json")]
    assert len(statuses) == 5 and {s.state for s in statuses} == {State.SUCCESS}


def test_notebook_session_plans_runs_and_materializes(tmp_path):
    env = {**os.environ, "STEPGRAPH_NB_PREFIX": str(tmp_path), "STEPGRAPH_NB_RUNNER": "inline",
           "PYTHONPATH": str(REPO)}
    source = (Path(__file__).parent / "notebook_session.py").read_text()
    done = subprocess.run([sys.executable, "-"], input=source, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["planned"] == {**{f"hello/{n}": "run" for n in ("words", "count", "greeting", "shout", "summary")},
                               "nb/exclaim": "run"}
    assert all(v == ["run", "succeeded", True] for v in seen["ran"].values())
    assert seen["exclaimed"].startswith("HI! The most common word is 'the'") and seen["exclaimed"].endswith("!!\n")
    assert Path(seen["materialized"], "summary.txt").exists() and seen["materialized"].startswith(str(tmp_path))
    assert all(v == ["skip", "succeeded"] for v in seen["again"].values())
    assert Path(seen["run_file"]).exists() and seen["again_run_file"] is None
    assert Path(seen["run_file"]).name.startswith("experiment-")  # no script to name it after
    assert seen["threads_left"] == [] and seen["ray_initialized"] is False
    record = json.loads(Path(seen["exclaim_path"], ".executor", "record.json").read_text())
    assert record["provenance"]["function"] == "__main__:exclaim"  # no file to name: the module it ran in


def test_the_docs_python_api_example_runs(tmp_path):
    """The first code block of docs/python-api.md, run as written (prefix moved to tmp)."""
    page = (REPO / "docs" / "python-api.md").read_text()
    code = page[page.index("```python\n") + len("```python\n"):page.index("```\n", page.index("```python"))]
    assert 'prefix="cache"' in code
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code.replace('"cache"', repr(str(tmp_path)))
                           + "\nprint('LOADED', executor.load_result(summary, options))"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "LOADED {'summary': \"HELLO! The most common word is 'the' (3x).\"}" in done.stdout
    assert len(list(tmp_path.glob("runs/experiment-*.json"))) == 1


def _explode_at_shout(event) -> None:
    """A subscriber that raises as soon as `hello/shout` has been leased and submitted: an error in
    the middle of a run."""
    if isinstance(event, StepStarted) and event.name == "hello/shout":
        raise RuntimeError("reporter exploded")


def test_an_error_mid_run_fails_that_step_and_releases_the_leases_it_held(tmp_path):
    """Issue 12, item 3: an error while starting one step fails that step (its lease released as
    FAILED naming the error, not RUNNING until it goes stale) and the run ends honestly (exit 1)."""
    [summary] = hello.build(hello.HelloOptions(pause_s=0.5))
    before = set(threading.enumerate())
    result = executor.run([summary], inline(tmp_path), subscribers=[_explode_at_shout])
    assert not result.ok and result.exit_code == 1
    assert result.step("hello/shout").status == "failed" and "reporter exploded" in result.step("hello/shout").error
    shout = [parse_status(p.read_bytes(), str(p)) for p in tmp_path.glob("hello/shout-*/.executor/status.json")]
    assert len(shout) == 1 and shout[0].state == State.FAILED  # not RUNNING until its lease goes stale
    assert "could not start: RuntimeError: reporter exploded" in shout[0].error
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("lease-heartbeat")]
    # the next run retries it at once (a failure of this invocation's first snapshot), no TTL wait
    assert executor.run([summary], inline(tmp_path)).ok


def test_every_option_is_a_flag_of_the_same_name_and_the_cli_passes_it_on():
    import dataclasses

    from executor.cli import ExecutorOptions, api_options

    flags_ = {f.name for f in dataclasses.fields(ExecutorOptions)}
    assert {f.name for f in dataclasses.fields(Options)} - {"storage_options"} <= flags_
    given = ExecutorOptions(prefix="p", only="a", force_failed=False, force_run="b", max_concurrent=3,
                            ray_address="auto", runner="inline", lease_ttl=9.0, heartbeat_interval=2.0)
    assert api_options(given) == Options(prefix="p", only="a", force_failed=False, force_run="b", max_concurrent=3,
                                         ray_address="auto", runner="inline", lease_ttl=9.0, heartbeat_interval=2.0)
    assert api_options(dataclasses.replace(given, drift="strict")).drift == "strict"  # None (no flag): warn


def test_a_ray_cluster_the_caller_started_is_used_and_left_running(tmp_path, ray_local):
    [summary] = hello.build(hello.HelloOptions())
    result = executor.run([summary], prefix=str(tmp_path), runner="ray")
    assert result.ok and {s.ran_here for s in result.steps} == {True}
    assert ray_local.is_initialized()  # the notebook's own cluster: not ours to shut down


def test_a_ray_the_library_started_is_not_shut_down_under_another_run_using_it(tmp_path, ray_local):
    """Two runs in one process, in two threads, on the Ray the first one connected: the first ends
    while the second's step still runs; the second succeeds, and only its end disconnects Ray."""
    address = ray_local.get_runtime_context().gcs_address
    script = f"""
import json, threading, time, ray, executor
from executor import ExecutorStep, this_output_path
from tests.executor.test_events import Rendezvous, rendezvous
d, out = {str(tmp_path)!r}, {{}}
def go(name, write, wait_for):
    try:
        step = ExecutorStep("shared/" + name, rendezvous, Rendezvous(this_output_path(), f"{{d}}/{{write}}", f"{{d}}/{{wait_for}}"))
        result = executor.run([step], prefix=f"{{d}}/{{name}}", runner="ray", ray_address={address!r})
        out[name] = [(s.status.value, s.error) for s in result.steps]
    except BaseException as e:
        out[name] = repr(e)
first = threading.Thread(target=go, args=("a", "a-started", "b-started"))
first.start()
while not ray.is_initialized():  # the first run connects: the library's Ray is its
    time.sleep(0.05)
second = threading.Thread(target=go, args=("b", "b-started", "a-done"))
second.start()
first.join()
out["connected_after_first"] = ray.is_initialized()
open(f"{{d}}/a-done", "w").write("x")
second.join()
out["connected_after_second"] = ray.is_initialized()
print(json.dumps(out))
"""
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "EXECUTOR_SHIP_CODE": "0",
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["a"] == [["succeeded", None]] and seen["b"] == [["succeeded", None]], seen
    assert seen["connected_after_first"] is True and seen["connected_after_second"] is False


def test_the_library_ray_is_started_once_and_shut_down_by_its_last_user_only(monkeypatch):
    """LibraryRay's count, without a cluster (the test above runs it on a real one): overlapping
    users share one start, the last to leave shuts Ray down, and a Ray the caller started is
    neither counted nor shut down."""
    import ray

    from executor.engine.runner.ray_runner import LibraryRay

    up, starts, shutdowns = [False], [], []
    monkeypatch.setattr(ray, "is_initialized", lambda: up[0])
    monkeypatch.setattr(ray, "shutdown", lambda: (shutdowns.append(True), up.__setitem__(0, False)))

    def start() -> None:
        starts.append(True)
        up[0] = True

    library = LibraryRay()
    assert library.enter(start) and library.enter(start) and len(starts) == 1
    library.leave()
    assert up[0] and not shutdowns  # the other user still has it
    library.leave()
    assert shutdowns == [True] and not up[0]
    up[0] = True  # the caller's own Ray
    assert library.enter(start) is False and len(starts) == 1 and library.users == 0


def test_the_command_line_plans_without_the_collector_and_runs_steps_with_it(tmp_path):
    """executor_main owns its process: it plans with the cyclic garbage collector paused, and before
    steps run it freezes what planning built and turns the collector back on; as the process exits
    it freezes what is left, so that the interpreter's last collection skips it (engine/run/collector.py).
    A caller that catches executor_main's SystemExit keeps its objects unfrozen (and, when no step ran,
    gets the collector back on). The library API, used in notebooks, leaves the collector alone."""
    script = f"""
import atexit, gc
from executor import executor_main
from experiments import hello
atexit.register(lambda: print("at exit:", gc.isenabled(), gc.get_freeze_count()))
try:
    executor_main(hello.build, config=hello.HelloOptions(),
                  argv=["--prefix", {str(tmp_path)!r}, "--runner", "inline"])
except SystemExit:
    print("after executor_main:", gc.isenabled(), gc.get_freeze_count())
    raise
"""

    def collector() -> list[tuple[bool, int]]:
        """(enabled, frozen objects) as executor_main ends, and at exit."""
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        lines = [line.split(":")[1].split() for line in done.stdout.splitlines() if ":" in line][-2:]
        return [(enabled == "True", int(frozen)) for enabled, frozen in lines]

    (enabled, frozen), (_, frozen_at_exit) = collector()  # runs the five steps
    assert enabled and frozen > 1000
    assert frozen_at_exit > frozen  # what running the steps built was frozen too, once exit began
    (enabled, frozen), (_, frozen_at_exit) = collector()  # nothing to do: planned, then the pause released
    assert (enabled, frozen) == (True, 0)  # a caller going on gets its collector back, nothing frozen
    assert frozen_at_exit > 1000

    import gc

    from experiments import hello

    before = gc.get_freeze_count()
    assert executor.run(hello.build(hello.HelloOptions()), prefix=str(tmp_path / "api"), runner="inline").ok
    # never more frozen (a command-line run earlier in this process froze objects that may be freed since)
    assert gc.isenabled() and gc.get_freeze_count() <= before
