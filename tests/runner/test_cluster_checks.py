"""Plan-time checks against a cluster's shape (pure), the live reporter, and log capture."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass

from rich.console import Console

from executor.engine.runner.capture import captured_output, log_path
from executor.engine.runner.cluster import MULTIHOST_PLACEMENT, NodeShape, check_steps, infeasible
from executor.core.step import Resources

GiB = 2**30
HEAD = NodeShape("n0", "10.0.0.1", {"CPU": 8, "memory": 32 * GiB, "object_store_memory": 1e9, "node:10.0.0.1": 1})
GPU = NodeShape("n1", "10.0.0.2", {"CPU": 16, "GPU": 4, "memory": 64 * GiB, "accelerator_type:A100": 1})
GPU2 = NodeShape("n2", "10.0.0.3", {"CPU": 16, "GPU": 4, "memory": 64 * GiB})


def test_single_host_requests():
    assert infeasible("ok", Resources(cpus=8), [HEAD, GPU]) is None
    assert infeasible("gpu", Resources(cpus=2, gpus=4), [HEAD, GPU]) is None
    why = infeasible("big", Resources(cpus=32), [HEAD, GPU])
    assert why and "'big' asks for {CPU=32}" in why and "CPU=16" in why and "2 node(s)" in why
    assert "object_store_memory" not in why and "node:" not in why  # internal resources hidden
    # the combination must exist on one node: 8 GPUs exist in total, but never on one node
    assert infeasible("gpus", Resources(gpus=8), [GPU, GPU2]) is not None
    assert "memory=100.0GiB" in infeasible("mem", Resources(memory_bytes=100 * GiB), [HEAD, GPU])
    assert "TPU=1" in infeasible("tpu", Resources(custom={"TPU": 1}), [HEAD, GPU])


def test_multi_host_requests():
    two = Resources(cpus=4, gpus=4, hosts=2)
    assert infeasible("train", two, [HEAD, GPU, GPU2]) is None
    why = infeasible("train", Resources(cpus=4, gpus=4, hosts=3), [HEAD, GPU, GPU2])
    assert why and "3 hosts" in why and "only 2 node(s)" in why
    # one host per node, always: a node with room for two hosts still runs one of them
    roomy = NodeShape("n0", "127.0.0.1", {"CPU": 8, "GPU": 8})
    assert "only 1 node(s)" in infeasible("pair", Resources(cpus=4, gpus=4, hosts=2), [roomy])
    assert MULTIHOST_PLACEMENT == "STRICT_SPREAD"


def test_local_prefix_refused_on_multi_node_cluster():
    problems = check_steps([("a", Resources())], [HEAD, GPU], prefix_is_local=True)
    assert len(problems) == 1 and "local prefix" in problems[0] and "gs://" in problems[0]
    assert check_steps([("a", Resources())], [HEAD, GPU], prefix_is_local=True, shared_filesystem=True) == []
    assert check_steps([("a", Resources())], [HEAD], prefix_is_local=True) == []
    assert check_steps([("a", Resources())], [HEAD, GPU], prefix_is_local=False) == []


def test_capture_tees_fd_level_output_and_appends(tmp_path, capfd):
    path = log_path(str(tmp_path / "out"), 3)
    assert path.endswith("/.executor/logs/attempt-3.log")
    with captured_output(path, "try 1"):
        print("python-level line", file=sys.__stdout__, flush=True)  # pytest swaps sys.stdout
        subprocess.run([sys.executable, "-c", "import os; os.write(2, b'fd-level stderr\\n')"], check=True)
    with captured_output(path, "try 2"):
        os.write(1, b"second try\n")
    text = open(path).read()
    assert "try 1" in text and "python-level line" in text and "fd-level stderr" in text
    assert text.index("try 2") < text.index("second try")
    seen = capfd.readouterr()
    assert "python-level line" in seen.out and "fd-level stderr" in seen.err  # still on the console


def test_live_reporter_degrades_to_lines_and_renders_on_terminal():
    from executor.core.graph import build_graph
    from executor.tools.console_live import LiveReporter
    from executor.core.plan import PlanOptions, plan_steps
    from executor import ExecutorStep, this_output_path
    from tests.runner import stepfns

    steps = [ExecutorStep(f"live/{i}", stepfns.probe, stepfns.Probe(this_output_path(), tag=str(i))) for i in range(3)]
    graph = build_graph(steps)
    plan = plan_steps(graph, {}, PlanOptions())
    nodes = [d.node for d in plan.decisions.values()]

    plain = io.StringIO()
    now = [100.0]
    reporter = LiveReporter(Console(file=plain, force_terminal=False, width=120), plan, clock=lambda: now[0])
    reporter.step_started(nodes[0], 1, False, "/x")
    reporter.step_started(nodes[1], 2, False, "/y")
    now[0] = 107.0
    reporter.step_succeeded(nodes[0], 7.0, {})
    assert "progress: 1/3 done, 1 running, 1 waiting (7s)" in plain.getvalue()
    panel = io.StringIO()
    Console(file=panel, force_terminal=True, width=120).print(reporter)
    assert "live/1 (attempt 2)" in panel.getvalue() and "7s" in panel.getvalue()
    reporter.close()
    assert plain.getvalue().rstrip().endswith("progress: 1/3 done, 1 running, 1 waiting (7s)")
    assert plain.getvalue().count("progress: 1/3 done") == 1  # close does not repeat the last line

    term = io.StringIO()
    live = LiveReporter(Console(file=term, force_terminal=True, width=100), plan)
    live.step_started(nodes[2], 1, False, "/z")
    assert live._live is not None  # a live panel on a terminal
    live.step_failed(nodes[2], "boom", None)
    live.close()
    assert live._live is None and "1 failed" in term.getvalue()


@dataclass(frozen=True)
class Nothing:
    output_path: str


def never_runs(config: Nothing) -> None:
    raise AssertionError("the run should stop before any step starts")


def test_an_address_nothing_listens_on_fails_in_seconds_with_nothing_written(tmp_path, capsys):
    """ray.init would retry for minutes; the executor checks the port first (exit 2)."""
    import time

    from executor import ExecutorStep, this_output_path
    from executor.cli import run
    from executor.engine.runner.ray_env import free_ports

    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = time.monotonic()
    code = run([ExecutorStep("join/never", never_runs, Nothing(this_output_path()))],
               argv=["--prefix", str(tmp_path), "--ray-address", address], environ={}, main_file=__file__)
    assert code == 2 and time.monotonic() - started < 30
    assert f"could not reach the Ray cluster at '{address}' (Connection refused)" in capsys.readouterr().err
    assert not list(tmp_path.rglob("status.json"))  # no lease was taken
