"""The library in a process that lives for days (a notebook, `stepgraph serve`): each run records
its own provenance, runs and loads on several threads do not trip each other, and nothing the
library does to the process (the collector, the environment, module globals) leaks between calls
(issue 45, item 5)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import executor
from executor import ExecutorStep, Resources, this_output_path
from executor.core.errors import ExecutorError
from executor.core.gc_pause import gc_paused
from executor.engine.runner.base import StepCall
from executor.engine.runner.inline import InlineRunner


@dataclass(frozen=True)
class Note:
    output_path: Any
    text: str = "hi"


def note(config: Note) -> dict:
    Path(config.output_path, "note.txt").write_text(config.text)
    return {"env": os.environ.get("STEPGRAPH_LONG_LIVED")}


def env_of(config: Note) -> dict:
    return {"env": os.environ.get("STEPGRAPH_LONG_LIVED")}


def _repo(root: Path, tracked: str) -> Path:
    """A git repository holding an experiment-like file, a tracked file and a uv.lock, committed."""
    root.mkdir(parents=True)
    (root / "experiment.py").write_text("# the experiment\n")
    (root / "tracked.txt").write_text(tracked)
    (root / "uv.lock").write_text("version = 1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(root), "commit", "-q", "-m", "first"], check=True)
    return root


def _provenance(result: executor.RunResult) -> dict:
    """What the run file recorded of the run's invocation (git state, uv.lock hash)."""
    return json.loads(Path(result.run_file).read_text())["invocation"]


def test_a_second_run_in_the_same_process_records_the_git_state_as_it_is_now(tmp_path):
    """A notebook: run, edit a tracked file (and uv.lock), run again: the second record says dirty,
    with the diff's hash and the new lock's, not the first run's clean state."""
    repo = _repo(tmp_path / "repo", "one\n")
    main_file = str(repo / "experiment.py")
    first = executor.run([ExecutorStep("nb/a", note, Note(this_output_path(), "a"))], prefix=str(tmp_path / "p"),
                         runner="inline", main_file=main_file)
    (repo / "tracked.txt").write_text("two\n")
    (repo / "uv.lock").write_text("version = 2\n")
    second = executor.run([ExecutorStep("nb/b", note, Note(this_output_path(), "b"))], prefix=str(tmp_path / "p"),
                          runner="inline", main_file=main_file)
    before, after = _provenance(first), _provenance(second)
    assert before["git"]["dirty"] is False and before["git"]["commit"]
    assert after["git"] == {"commit": before["git"]["commit"], "dirty": True,
                            "diff_sha256": after["git"]["diff_sha256"]} and after["git"]["diff_sha256"]
    assert before["uv_lock_sha256"] != after["uv_lock_sha256"]


def test_two_runs_on_two_threads_each_record_their_own_repository(tmp_path):
    clean = _repo(tmp_path / "clean", "clean\n")
    dirty = _repo(tmp_path / "dirty", "dirty\n")
    (dirty / "tracked.txt").write_text("edited\n")
    results: dict[str, Any] = {}
    start = threading.Barrier(2)

    def run(name: str, repo: Path) -> None:
        start.wait(timeout=30)
        results[name] = executor.run([ExecutorStep(f"t/{name}", note, Note(this_output_path(), name))],
                                     prefix=str(tmp_path / f"prefix-{name}"), runner="inline",
                                     main_file=str(repo / "experiment.py"))

    threads = [threading.Thread(target=run, args=(n, r)) for n, r in (("clean", clean), ("dirty", dirty))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert all(r.ok for r in results.values()), results
    assert _provenance(results["clean"])["git"]["dirty"] is False
    assert _provenance(results["dirty"])["git"]["dirty"] is True
    assert results["clean"].prefix != results["dirty"].prefix


def test_collector_pauses_on_two_threads_end_with_the_collector_as_found():
    """A pause is counted: the first in notes the collector's state, the last out restores it. A
    thread whose pause ends while another's goes on leaves the collector off for the other."""
    was = gc.isenabled()
    gc.enable()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def a() -> None:
        with gc_paused():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with gc_paused():
            b_in.set()
            a_out.wait(10)
            seen["during b, after a ended"] = gc.isenabled()

    try:
        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert seen == {"during b, after a ended": False}
        assert gc.isenabled()  # the last pause out turned it back on
        gc.disable()
        with gc_paused(), gc_paused():
            pass
        assert not gc.isenabled()  # found disabled: left disabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_steps_environment_is_given_to_its_child_and_never_set_in_the_runner(tmp_path, start_method):
    runner = InlineRunner(start_method=start_method)
    seen_in_parent: list[str | None] = []
    stop = threading.Event()

    def watch() -> None:  # the runner's own environment while the steps run
        while not stop.is_set():
            seen_in_parent.append(os.environ.get("STEPGRAPH_LONG_LIVED"))
            stop.wait(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        handles = []
        for name in ("one", "two"):
            call = StepCall(name, note, Note(str(tmp_path / name), name), str(tmp_path / name),
                            Resources(env={"STEPGRAPH_LONG_LIVED": name}), {"STEPGRAPH_LONG_LIVED": name})
            (tmp_path / name).mkdir()
            handles.append(runner.submit(call))
        outcomes = [h.future.result(timeout=120) for h in handles]
    finally:
        stop.set()
        watcher.join()
        runner.shutdown()
    assert [o.result for o in outcomes] == [{"env": "one"}, {"env": "two"}], outcomes
    assert set(seen_in_parent) == {None} and "STEPGRAPH_LONG_LIVED" not in os.environ


def test_a_step_with_an_environment_is_refused_on_a_memory_prefix_before_anything_runs(tmp_path):
    """memory:// steps run on threads of this process, which share one environment."""
    step = ExecutorStep("mem/env", env_of, Note(this_output_path()), resources=Resources(env={"STEPGRAPH_LONG_LIVED": "x"}))
    with pytest.raises(ExecutorError) as caught:
        executor.run([step], prefix=f"memory://{tmp_path.name}/env", runner="inline")
    message = str(caught.value)
    assert "'mem/env'" in message and "STEPGRAPH_LONG_LIVED" in message and "local directory prefix" in message
    assert "STEPGRAPH_LONG_LIVED" not in os.environ
    plain = ExecutorStep("mem/plain", env_of, Note(this_output_path()))  # without env: runs on a thread
    assert executor.run([plain], prefix=f"memory://{tmp_path.name}/env", runner="inline").ok
    # and a call handed to the threaded runner anyway fails at once, never setting the variable
    env = {"STEPGRAPH_LONG_LIVED": "x"}
    outcome = InlineRunner(isolate=False).submit(StepCall("mem/env-abc", env_of, Note("unused"), "unused",
                                                          Resources(env=env), env)).outcome()
    assert not outcome.ok and "'mem/env-abc'" in outcome.error and "STEPGRAPH_LONG_LIVED" not in os.environ


EXPERIMENT = '''
import rendezvous
from dataclasses import dataclass
from typing import Any
from executor import ExecutorStep, executor_main, this_output_path

@dataclass(frozen=True)
class Config:
    output_path: Any
    who: str = {who!r}

def work(config: Config) -> None:
    pass

rendezvous.meet({who!r})  # under the tests, both files are loading at once, each on its own thread
if __name__ == "__main__":
    executor_main([ExecutorStep({who!r} + "/step", work, Config(this_output_path()))])
'''

RENDEZVOUS = '''
import sys, threading
BARRIER = threading.Barrier(2)
LEFT_DONE = threading.Event()


def meet(who):
    if "pytest" not in sys.modules:  # run as a script
        return
    BARRIER.wait(timeout=30)
    if who == "right":  # the left file's load ends first, while the right one's is still going
        LEFT_DONE.wait(timeout=30)
'''


def _wait_for(condition: Any) -> None:
    for _ in range(600):
        if condition():
            return
        threading.Event().wait(0.05)
    raise AssertionError("the left load never reached its rendezvous")


def test_two_experiments_load_on_two_threads_without_touching_module_globals(tmp_path):
    """Two loads in flight at once, the first to start ending first: with globals swapped and
    restored per load, the second would restore the first's stand-in for executor_main. Their folder
    is on sys.path while either loads (the first to end must not take it from the second) and not
    after."""
    from executor.tools.loading import load_experiment

    (tmp_path / "rendezvous.py").write_text(RENDEZVOUS)
    for who in ("left", "right"):
        (tmp_path / f"{who}.py").write_text(EXPERIMENT.format(who=who))
    before = (executor.executor_main, sys.modules["__main__"], list(sys.argv), list(sys.path))
    loaded: dict[str, Any] = {}

    def load(who: str) -> None:
        try:
            loaded[who] = load_experiment(tmp_path / f"{who}.py")
        except BaseException as e:  # noqa: BLE001 - shown by the assertion below
            loaded[who] = e

    left, right = (threading.Thread(target=load, args=(who,)) for who in ("left", "right"))
    try:
        left.start()
        _wait_for(lambda: "rendezvous" in sys.modules and sys.modules["rendezvous"].BARRIER.n_waiting == 1)
        right.start()
        left.join(60)
        sys.modules["rendezvous"].LEFT_DONE.set()
        right.join(60)
    finally:
        sys.modules.pop("rendezvous", None)
    for who in ("left", "right"):
        assert [n.name for n in loaded[who].graph.nodes.values()] == [f"{who}/step"], loaded
    # the files' folder was on sys.path while they loaded (both import rendezvous.py beside them), not after
    assert (executor.executor_main, sys.modules["__main__"], list(sys.argv), list(sys.path)) == before
    # named by their files, as when run as scripts: `python left.py` gives the same id
    done = subprocess.run([sys.executable, str(tmp_path / "left.py"), "--dry-run", "--json", "--prefix",
                           str(tmp_path / "p")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert loaded["left"].graph.nodes[next(iter(loaded["left"].graph.nodes))].step_id in done.stdout, done.stderr


def test_the_api_reads_the_process_environment_in_one_function():
    """executor/api.py: `environment()` is the one reader of os.environ; every public function calls
    it once and passes what it read inward (a run's parts all see the same values)."""
    import ast

    source = Path(executor.__file__).with_name("api.py")
    readers = set()
    for fn in ast.walk(ast.parse(source.read_text())):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") \
                        and isinstance(node.value, ast.Name) and node.value.id == "os":
                    readers.add(fn.name)
    assert readers == {"environment"}


def test_a_run_without_environ_reads_the_process_environment_once(tmp_path, monkeypatch):
    """One copy of os.environ per run, taken as it starts: a setting changed while the run plans
    and runs is not half-seen."""
    from executor import api

    copies = []
    real = api.environment

    def counted(environ):
        copies.append(environ is None)
        return real(environ)

    monkeypatch.setattr(api, "environment", counted)
    monkeypatch.setenv("EXECUTOR_PREFIX", str(tmp_path / "p"))
    result = executor.run([ExecutorStep("env/once", note, Note(this_output_path()))], runner="inline",
                          main_file=str(tmp_path / "x.py"))
    assert result.ok and result.prefix == str(tmp_path / "p")
    assert copies == [True] + [False] * (len(copies) - 1)
