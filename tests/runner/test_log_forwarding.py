"""The driver-side wrapper around Ray's printer of worker output, driven through Ray's own log
dispatcher and printer (no cluster needed): markers swallowed and awaited, no colour when piped."""

from __future__ import annotations

import functools
import threading

import pytest

from executor.engine.runner import log_forwarding


@pytest.fixture
def ray_printer(monkeypatch):
    """Ray's printer registered as ray.init(log_to_driver=True) registers it; removed afterwards."""
    from ray._private import worker

    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    dispatcher = worker.global_worker_stdstream_dispatcher
    dispatcher.add_handler("ray_print_logs", functools.partial(worker.print_to_stdstream, ignore_prefix=False))
    yield dispatcher
    dispatcher.remove_handler("ray_print_logs")


def batch(lines, is_err):
    return {"lines": lines, "pid": 42, "ip": "127.0.0.1", "localhost": "127.0.0.1", "is_err": is_err,
            "task_name": "s/x-abc", "job": "01"}


def test_markers_are_swallowed_and_awaited_and_piped_output_is_plain(ray_printer, capsys):
    assert log_forwarding.plain_when_piped()  # pytest's captured stdout is not a terminal
    log_forwarding.install()
    log_forwarding.install()  # idempotent
    key = log_forwarding.output_key("s/x-abc", 1)
    assert not log_forwarding.wait_for_output(key, 0.1)

    def emit():
        for is_err in (False, True):
            ray_printer.emit(batch([f"step says {is_err}", log_forwarding.MARKER + key], is_err))
    threading.Timer(0.2, emit).start()
    assert log_forwarding.wait_for_output(key, 5)
    out, err = capsys.readouterr()
    assert out == "(s/x-abc pid=42) step says False\n" and err == "(s/x-abc pid=42) step says True\n"
    log_forwarding.forget(key)
    assert not log_forwarding.wait_for_output(key, 0.05)


def test_without_the_setting_ray_colours_its_prefixes(ray_printer, capsys):
    ray_printer.emit(batch(["hello"], False))
    assert "\x1b[" in capsys.readouterr().out  # what the installed printer takes out when piped


def test_a_batchs_lines_are_printed_before_its_marker_counts_as_seen(ray_printer, monkeypatch):
    """Else the driver could print a step's ✔ line between the two, ahead of its last lines."""
    from ray._private import worker

    log_forwarding.install()
    key = log_forwarding.output_key("s/x-abc", 7)
    seen_when_printed = []
    real_print = worker.print_worker_logs  # Ray's printer, whether the lines go through its colours or not

    def print_and_note(data, *args, **kwargs):
        seen_when_printed.append(log_forwarding.forwarded("s/x-abc", 7))
        real_print(data, *args, **kwargs)

    monkeypatch.setattr(worker, "print_worker_logs", print_and_note)
    for is_err in (False, True):
        ray_printer.emit(batch([f"last line {is_err}", log_forwarding.MARKER + key], is_err))
    assert seen_when_printed == [False, False] and log_forwarding.forwarded("s/x-abc", 7)
    log_forwarding.forget(key)


def test_forwarded_lines_and_the_runs_own_lines_never_share_a_line(ray_printer, capsys):
    """Ray prints a forwarded line's text and newline in two writes; a ✔ line printed from the main
    thread between them used to land inside a step's line (a piped run lost its ✔ line once in ~30)."""
    import sys

    from executor.tools.console_reporter import ConsoleReporter

    log_forwarding.install()
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the race every run
    try:
        def forward():
            for i in range(300):
                ray_printer.emit(batch([f"step line {i}", f"step line {i}b"], i % 3 == 0))
        thread = threading.Thread(target=forward)
        console = ConsoleReporter().console
        thread.start()
        for i in range(300):
            console.print(f"✔ step/{i} (0.1s)")
        thread.join()
    finally:
        sys.setswitchinterval(before)
    out, err = capsys.readouterr()
    lines = out.splitlines() + err.splitlines()
    whole = [line for line in lines if line.startswith("✔ step/") or line.startswith("(s/x-abc pid=42) step line")]
    mixed = [line for line in lines if line not in whole or line.count("step") != 1]
    assert not mixed, mixed[:5]
    assert len(lines) == 300 + 600
