"""What a real run tells a person or a CI log (issues 19.5, 19.8, 20.6): what changed, periodic
"still running" lines when piped, and a closing per-step table with each step's result."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from executor.tools.console_live import LiveReporter
from tests.executor.test_flags import hello_run

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "experiments" / "hello.py"


def test_a_piped_run_says_what_changed_prints_still_running_lines_and_ends_with_a_table(tmp_path):
    env = {**os.environ, "EXECUTOR_STILL_RUNNING_EVERY_S": "0.5"}
    base = [sys.executable, str(HELLO), "--prefix", str(tmp_path), "--runner", "inline"]
    first = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    second = subprocess.run([*base, "--greeting", "Yo", "--pause-s", "2"], capture_output=True, text=True,
                            env=env, timeout=120)
    out = second.stdout
    assert second.returncode == 0, out + second.stderr
    assert "what changed since the nearest earlier version:" in out
    assert "hello/greeting: vs hello/greeting-" in out and "config.greeting: 'Hello' -> 'Yo'" in out
    assert "still running hello/shout (" in out  # a 2 s step is not silent in a log
    table = out[out.index("this run"):]
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in table.splitlines() if line.startswith("│") and line.split("│")[1].strip()}
    assert rows["hello/words"] == ["skipped", "-", "succeeded earlier"]
    assert rows["hello/shout"][:2] == ["ran", rows["hello/shout"][1]] and rows["hello/shout"][1].endswith("s")
    assert rows["hello/shout"][2] == "shout=YO!"
    assert "\x1b[" not in out  # plain text in a pipe


def test_still_running_lines_come_on_their_own_and_stop_at_close():
    buffer = io.StringIO()
    reporter = LiveReporter(console=Console(file=buffer, force_terminal=False, width=200), still_running_every_s=0.05)

    class Node:
        digest, name, step_id = "d" * 64, "slow/step", "slow/step-dddddddddddd"

    reporter.step_started(Node, 1, False, "/x")
    deadline = time.monotonic() + 30
    while "still running slow/step (" not in buffer.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "still running slow/step (" in buffer.getvalue()
    reporter.close()
    after_close = buffer.getvalue()
    time.sleep(0.2)
    assert buffer.getvalue() == after_close  # the ticker stopped


def test_a_failed_run_table_names_the_error(tmp_path, capsys):
    assert hello_run(tmp_path, "--fail-shout") == 1
    out = capsys.readouterr().out
    table = out[out.index("this run"):]
    assert "failing on purpose" in table and "blocked" in table


def test_a_targets_latest_attempt_log_is_echoed_into_a_pipe(tmp_path):
    """On Ray, what a final step prints goes through Ray's log forwarding, which can miss a pipe;
    the run echoes the target's own attempt log (written by runner/capture.py) at the end."""
    import fsspec

    from executor.core.graph import build_graph
    from executor.tools.console_reporter import ConsoleReporter, echo_step_logs
    from executor.engine.runner.capture import log_path
    from experiments import hello

    graph = build_graph(hello.build(hello.HelloOptions()))
    target = graph.nodes[graph.targets[0]]
    output = tmp_path / target.output_rel
    for attempt, text in ((1, "first try\n"), (2, "bits per byte: 2.1 model | 4.5 unigram\n")):
        path = Path(log_path(str(output), attempt))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    buffer = io.StringIO()
    reporter = ConsoleReporter(Console(file=buffer, force_terminal=False, width=200))
    echo_step_logs(reporter, graph, [target.step_id], fsspec.filesystem("file"), str(tmp_path))
    out = buffer.getvalue()
    assert f"output of {target.name}" in out and "bits per byte: 2.1 model" in out and "first try" not in out
    buffer.truncate(0)
    echo_step_logs(reporter, graph, [], fsspec.filesystem("file"), str(tmp_path))  # did not run here: nothing
    assert buffer.getvalue().strip("\x00") == ""
    buffer.truncate(0)  # Ray's forwarding confirmed attempt 2 reached the console: no second copy
    echo_step_logs(reporter, graph, [target.step_id], fsspec.filesystem("file"), str(tmp_path),
                   forwarded=lambda step_id, attempt: (step_id, attempt) == (target.step_id, 2))
    assert buffer.getvalue().strip("\x00") == ""
