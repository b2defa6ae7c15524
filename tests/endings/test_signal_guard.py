"""executor.engine.run.signals in a real process with real signals: interrupt handling that never
ends is cut short by the watchdog, and a second signal forces the exit, both after the
last-breath callbacks ran (leases released, the run file's exit code written)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import pathlib, sys, threading
    from executor.engine.run.signals import SignalGuard, own_process

    own_process()

    out, grace = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    with SignalGuard(grace_s=grace) as guard:
        guard.on_force(lambda signum: out.write_text(f"last breath {signum}"))
        try:
            print("ready", flush=True)  # inside the try: the test signals as soon as it reads this
            threading.Event().wait()
        except KeyboardInterrupt as e:
            print(f"interrupted: {e}", flush=True)
            threading.Event().wait()  # interrupt handling that never ends (a Ray call that hangs)
""")


def start(tmp_path, grace_s: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "breath"), str(grace_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the process did not exit")
    return proc.returncode, out


def test_watchdog_ends_interrupt_handling_that_hangs(tmp_path):
    proc = start(tmp_path, grace_s=1)
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc)
    assert code == 143, out
    assert "interrupted: terminated (SIGTERM)" in out and "still running after 1s" in out
    assert (tmp_path / "breath").read_text() == f"last breath {int(signal.SIGTERM)}"


def test_second_ctrl_c_forces_the_exit(tmp_path):
    proc = start(tmp_path, grace_s=600)  # only the second signal can end it within the test
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "interrupted: interrupted (Ctrl-C)"
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc)
    assert code == 130 and "second signal" in out, out
    assert (tmp_path / "breath").read_text() == f"last breath {int(signal.SIGINT)}"
