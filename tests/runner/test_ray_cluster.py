"""The Ray runner on a real cluster: plan-time resource checks, routing by custom resources,
retries that tell a dead worker from a user error, per-attempt logs and environment, joining a
cluster from another directory, and Ctrl-C (multi-host steps: test_multinode.py).

One `ray start --head` (tests/runner/conftest.py) serves the whole module. In-process tests
connect this pytest process as a driver once (module fixture); the join and Ctrl-C tests run
experiment files as separate driver processes in their own working directories.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from executor import ExecutorStep, this_output_path
from executor.cli import run
from executor.core.record import State, parse_status
from executor.core.step import Resources
from tests.runner import stepfns

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def driver(ray_head):
    """This process connected to the test head (RayRunner then reuses the connection)."""
    import ray

    ray.init(address=ray_head.address, log_to_driver=False)
    yield ray_head
    ray.shutdown()


def execute(steps, prefix: Path, *args: str) -> int:
    return run(steps, argv=["--prefix", str(prefix), "--ray-address", "auto", "--lease-ttl", "20",
                            "--heartbeat-interval", "2", *args], main_file=__file__)


def step_dir(prefix: Path, name: str) -> Path:
    [path] = [p for p in prefix.glob(f"{name}-*") if p.is_dir()]
    return path


def status_of(prefix: Path, name: str):
    path = step_dir(prefix, name) / ".executor" / "status.json"
    return parse_status(path.read_bytes(), str(path))


def record_of(prefix: Path, name: str) -> dict:
    return json.loads((step_dir(prefix, name) / ".executor" / "record.json").read_text())


def probe_step(name: str, resources: Resources | None = None, **kw) -> ExecutorStep:
    return ExecutorStep(name, stepfns.probe, stepfns.Probe(this_output_path(), tag=name, **kw), resources=resources)


# -- plan time -----------------------------------------------------------------------------
def test_impossible_requests_are_reported_at_plan_time(driver, tmp_path, capsys):
    steps = [probe_step("fine"),
             probe_step("greedy", Resources(cpus=64)),
             probe_step("tpu", Resources(custom={"TPU-v9": 1})),
             probe_step("wide", Resources(hosts=2))]  # one node: two hosts need two (test_multinode.py)
    assert execute(steps, tmp_path) == 2
    err = capsys.readouterr().err
    assert "'greedy' asks for {CPU=64}" in err and "CPU=4" in err  # the request and what exists
    assert "'tpu' asks for {CPU=1, TPU-v9=1}" in err
    assert "'wide' asks for 2 hosts" in err and "only 1 node(s)" in err
    assert "'fine'" not in err
    assert not list(tmp_path.glob("*/.executor/status.json")), "nothing may run or be leased"


# -- routing, environment, logs ------------------------------------------------------------
def test_custom_resources_route_and_env_and_logs(driver, tmp_path):
    special = probe_step("special", Resources(custom={"special": 1}, env={"STEPGRAPH_TEST_VAR": "hello-env"}))
    assert execute([special], tmp_path) == 0
    result = record_of(tmp_path, "special")["result"]
    assert result["assigned"].get("special") == 1.0  # Ray gave the task the resource it asked for
    assert result["env"] == "hello-env"
    log = (step_dir(tmp_path, "special") / ".executor" / "logs" / "attempt-1.log").read_text()
    assert "probe special running in pid" in log and "from-a-subprocess" in log
    assert "try 1" in log


# -- retries -------------------------------------------------------------------------------
def test_killed_worker_is_retried_and_attempts_recorded(driver, tmp_path):
    step = probe_step("killed", Resources(max_infra_retries=2), mode="kill-once")
    assert execute([step], tmp_path) == 0
    assert status_of(tmp_path, "killed").state == State.SUCCESS
    record = record_of(tmp_path, "killed")
    attempts = record["extra"]["attempts"]
    assert [a["cause"] for a in attempts] == ["infrastructure", "ok"], attempts
    assert "WorkerCrashedError" in attempts[0]["error"] or "died" in attempts[0]["error"].lower()
    assert record["result"]["calls"] == 2
    # the retry resumed in the step's own directory: the first try's marker is still there
    assert (step_dir(tmp_path, "killed") / "killed-once").exists()
    log = (step_dir(tmp_path, "killed") / ".executor" / "logs" / "attempt-1.log").read_text()
    assert "try 1" in log and "try 2" in log


def test_user_exception_is_not_retried(driver, tmp_path):
    step = probe_step("broken", Resources(max_infra_retries=3), mode="raise")
    assert execute([step], tmp_path) == 1
    status = status_of(tmp_path, "broken")
    assert status.state == State.FAILED and "ValueError: user error in broken" in status.error
    calls = (step_dir(tmp_path, "broken") / "calls.txt").read_text().split()
    assert len(calls) == 1, "an exception in the step's own code must not be retried"


def test_a_steps_own_keyboard_interrupt_is_its_error_not_a_cancel(driver, tmp_path):
    steps = [probe_step("ki", Resources(max_infra_retries=3), mode="keyboard-interrupt"), probe_step("sibling")]
    assert execute(steps, tmp_path) == 1  # not 130: nobody pressed Ctrl-C
    status = status_of(tmp_path, "ki")
    assert status.state == State.FAILED and status.error.startswith("KeyboardInterrupt: ki raised")
    assert len((step_dir(tmp_path, "ki") / "calls.txt").read_text().split()) == 1  # a user error: not retried
    assert status_of(tmp_path, "sibling").state == State.SUCCESS


def test_user_errors_retried_when_asked(driver, tmp_path):
    """Both tries' output stays in the attempt's log: the retry appends, it does not start it over."""
    step = probe_step("flaky", Resources(retry_user_errors=1), mode="raise-once")
    assert execute([step], tmp_path) == 0
    record = record_of(tmp_path, "flaky")
    assert [a["cause"] for a in record["extra"]["attempts"]] == ["user", "ok"]
    pids = (step_dir(tmp_path, "flaky") / "calls.txt").read_text().split()
    log = (step_dir(tmp_path, "flaky") / ".executor" / "logs" / "attempt-1.log").read_text()
    assert len(pids) == 2 and all(f"probe flaky running in pid {pid}" in log for pid in pids), (pids, log)
    assert log.count("from-a-subprocess") == 2, log


def test_a_failed_step_run_again_keeps_the_first_attempt_s_log_and_writes_its_own(driver, tmp_path):
    """docs/watching.md: each attempt's output is kept in attempt-<n>.log. A step that failed
    (attempt 1) and is run again by the next run (attempt 2): attempt 1's log is left as it was,
    attempt 2 writes attempt-2.log with its own output only."""
    step = probe_step("again", mode="raise-once")
    assert execute([step], tmp_path) == 1
    logs = step_dir(tmp_path, "again") / ".executor" / "logs"
    first = (logs / "attempt-1.log").read_bytes()
    [first_pid] = (step_dir(tmp_path, "again") / "calls.txt").read_text().split()
    assert f"probe again running in pid {first_pid}".encode() in first, first
    assert execute([step], tmp_path) == 0
    assert status_of(tmp_path, "again").attempt == 2
    second_pid = (step_dir(tmp_path, "again") / "calls.txt").read_text().split()[1]  # calls: one a line
    assert (logs / "attempt-1.log").read_bytes() == first, "attempt 2 wrote into attempt 1's log"
    second = (logs / "attempt-2.log").read_text()
    assert f"probe again running in pid {second_pid}" in second and "attempt 2 try 1" in second, second
    assert "attempt 1" not in second and second.count("probe again running") == 1, second  # Ray may reuse the pid


# -- cancelling a running task (what a lost lease or a timeout does) -----------------------
def test_cancel_stops_the_running_task(driver, tmp_path):
    from executor.engine.runner.base import StepCall
    from executor.engine.runner.ray_runner import RayRunner

    runner = RayRunner(address="auto")
    out = tmp_path / "cancelled"
    out.mkdir()
    call = StepCall("cancel-me", stepfns.probe, stepfns.Probe(str(out), mode="sleep", sleep_s=60), str(out))
    handle = runner.submit(call)
    deadline = time.monotonic() + 60
    while not (out / "heartbeat").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    handle.cancel()
    outcome = handle.outcome()
    assert not outcome.ok and outcome.error == "cancelled" and outcome.attempts[-1]["cause"] == "cancelled"
    assert worker_gone(out / "started"), "the cancelled task kept running"


# -- separate driver processes -------------------------------------------------------------
EXPERIMENT = '''
import sys
from dataclasses import dataclass
from executor import ExecutorStep, executor_main, this_output_path
from executor.core.step import Resources
import helpers_{tag} as helpers

@dataclass(frozen=True)
class Options:
    sleep_s: float = 0.0

def build(options):
    first = ExecutorStep("demo/where", helpers.where, helpers.Where(this_output_path()))
    slow = ExecutorStep("demo/slow", helpers.slow, helpers.Slow(this_output_path(), options.sleep_s))
    return [first, slow]

if __name__ == "__main__":
    executor_main(build, "joined", config=Options())
'''

HELPERS = '''
import os, sys, time
from dataclasses import dataclass
from pathlib import Path
from executor import execution_only
@dataclass(frozen=True)
class Where:
    output_path: str

def where(config):
    import helpers_{tag}
    return {{"module_file": helpers_{tag}.__file__, "cwd": os.getcwd(),
             "head_env": os.environ.get("STEPGRAPH_TEST_HEAD")}}

@dataclass(frozen=True)
class Slow:
    output_path: str
    sleep_s: float = execution_only(0.0)

def slow(config):
    out = Path(config.output_path)
    (out / "started").write_text(str(os.getpid()))
    deadline = time.time() + config.sleep_s
    while time.time() < deadline:
        (out / "heartbeat").write_text(str(time.time()))
        time.sleep(0.2)
    return {{"slept": config.sleep_s}}
'''


def write_experiment(where: Path, tag: str, library: Path | None = None) -> Path:
    where.mkdir(parents=True)
    library = library or where
    library.mkdir(parents=True, exist_ok=True)
    (library / f"helpers_{tag}.py").write_text(textwrap.dedent(HELPERS.format(tag=tag)))
    path = where / "exp.py"
    path.write_text(textwrap.dedent(EXPERIMENT.format(tag=tag)))
    return path


def driver_env(address: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(RAY_ADDRESS=address, PYTHONUNBUFFERED="1", **extra)
    return env


def unshipped_driver_env(address: str) -> dict[str, str]:
    """A driver that sends no code: the head's workers are on this machine and import the experiment from
    the driver's script directory (Ray hands its sys.path to the job's workers). For the tests about
    something else than shipping (the join test above ships): no runtime-env package built and unpacked
    per driver run (issue 46)."""
    return driver_env(address, EXECUTOR_SHIP_CODE="0")


def test_join_existing_cluster_from_another_directory(ray_head, tmp_path):
    """The head runs in its own cwd/env; the driver is an experiment file elsewhere, run from a
    third directory. Its helper module lives on the driver's PYTHONPATH only (Ray passes a driver's
    script dir and cwd to workers, not its PYTHONPATH), so workers can import it only if the
    runner ships it through the runtime env (py_modules) — as on a real multi-node cluster."""
    library = tmp_path / "driver-only-lib"
    exp = write_experiment(tmp_path / "experiment", "join", library=library)
    elsewhere = tmp_path / "driver-cwd"
    elsewhere.mkdir()
    prefix = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(exp), "--prefix", str(prefix)], cwd=elsewhere,
                          env=driver_env(ray_head.address, PYTHONPATH=str(library)),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"joining Ray cluster at {ray_head.address}" in proc.stdout
    result = record_of(prefix / "demo", "where")["result"]
    assert result["head_env"] == "1", "the task ran in a worker of the head started by the test"
    assert "runtime_resources" in result["module_file"], result  # shipped as py_modules, not found on disk


def worker_gone(pid_file: Path, timeout: float = 120) -> bool:
    """Wait (on the condition, not a fixed sleep) until the process that ran a step has exited."""
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def interrupt_slow_step(ray_head, tmp_path, sig: int) -> tuple[subprocess.Popen, str, Path]:
    exp = write_experiment(tmp_path / "experiment", f"sig{int(sig)}")
    prefix = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(exp), "--prefix", str(prefix), "--sleep-s", "120"],
                            cwd=tmp_path, env=unshipped_driver_env(ray_head.address), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while not list(prefix.glob("demo/slow-*/heartbeat")):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the slow step never started"
            time.sleep(0.3)
        proc.send_signal(sig)
        # Bounded whatever Ray does: the signal watchdog exits within seconds (executor.engine.run.signals)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, output, exp


def test_sigterm_releases_leases_and_exits_143(ray_head, tmp_path):
    """SIGTERM (Kubernetes, SLURM, `ray job stop`, preemption) ends a run like Ctrl-C does."""
    check_signalled(ray_head, tmp_path, signal.SIGTERM, 143, "terminated (SIGTERM)")


def test_ctrl_c_cancels_and_rerun_completes(ray_head, tmp_path):
    exp = check_signalled(ray_head, tmp_path, signal.SIGINT, 130, "interrupted (Ctrl-C)")
    prefix = tmp_path / "out"
    again = subprocess.run([sys.executable, str(exp), "--prefix", str(prefix), "--sleep-s", "0.5"],
                           cwd=tmp_path, env=unshipped_driver_env(ray_head.address), capture_output=True, text=True,
                           timeout=240)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert status_of(prefix / "demo", "slow").state == State.SUCCESS
    assert status_of(prefix / "demo", "slow").attempt == 2


def check_signalled(ray_head, tmp_path, sig: int, code: int, reason: str) -> Path:
    """The driver returned `code`; the step's lease was released with `reason`, its Ray worker is
    gone (waited for, not slept on: under load the kill can take seconds), nothing was committed,
    and the run file carries the exit code."""
    proc, output, exp = interrupt_slow_step(ray_head, tmp_path, sig)
    prefix = tmp_path / "out"
    assert proc.returncode == code, output[-3000:]
    slow = status_of(prefix / "demo", "slow")
    assert slow.state == State.FAILED and slow.error == reason
    assert worker_gone(step_dir(prefix / "demo", "slow") / "started"), "the step's Ray task kept running"
    assert not (step_dir(prefix / "demo", "slow") / ".executor" / "record.json").exists()
    [run_file] = (prefix / "runs").glob("*.json")
    assert json.loads(run_file.read_text())["exit_code"] == code
    return exp
