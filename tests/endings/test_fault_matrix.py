"""Every way a run can end leaves the store clean (issue 12's fault matrix).

For each ending — success, step failure, storage error mid-run, output-path clash, Ctrl-C, double
Ctrl-C, SIGTERM, SIGKILL (then a fresh runner), step timeout, lease lost — a real executor
subprocess (gated.py, inline runner) ends, and then: it returned the documented exit code; no
lease is RUNNING unless its holder lives; its run file carries that exit code (SIGKILL excepted);
every committed output is byte-identical to its manifest. On local disk and on the S3 emulator.
"""

from __future__ import annotations

import signal

import pytest

from tests.endings.conftest import BOTH
from tests.endings.harness import TAKER_TTL, Driver, assert_clean, started, statuses, wait_for


def test_success(local, sidefx, tmp_path):
    backend = local
    d = Driver(backend, sidefx, tmp_path / "run.log")
    assert d.wait() == 0, d.output()[-3000:]
    found = assert_clean(backend, d, 0)
    assert {n: s["state"] for n, s in found.items()} == dict.fromkeys(("first", "second", "long"), "SUCCESS")


def test_step_failure(local, sidefx, tmp_path):
    backend = local
    d = Driver(backend, sidefx, tmp_path / "run.log", first="raise")
    assert d.wait() == 1, d.output()[-3000:]
    found = assert_clean(backend, d, 1)
    assert found["first"]["state"] == "FAILED" and "failed on purpose" in found["first"]["error"]
    assert "second" not in found and found["long"]["state"] == "SUCCESS"  # blocked; the other branch finished


def test_storage_error_mid_run_fails_that_step_only(local, sidefx, tmp_path):
    """A step's .executor/ is unusable (a file where its directory should be) once the run is under
    way: that step fails, the run goes on, exits 1 and records it."""
    backend = local
    d = Driver(backend, sidefx, tmp_path / "run.log", first="gate", long="sleep:1")
    wait_for(lambda: started(sidefx, "first"), 60, "end/first to start", d)
    shared = tmp_path / "prefix" / "end" / "shared"
    shared.mkdir(parents=True)
    (shared / ".executor").write_text("not a directory")
    (sidefx / "go").touch()
    assert d.wait() == 1, d.output()[-3000:]
    found = assert_clean(backend, d, 1)
    assert found["first"]["state"] == "SUCCESS" and found["long"]["state"] == "SUCCESS"
    assert "end/second failed: could not start" in d.output()


def test_output_path_clash_mid_run_fails_that_step_only(local, sidefx, tmp_path):
    backend = local
    d = Driver(backend, sidefx, tmp_path / "run.log", first="gate", long="sleep:1")
    wait_for(lambda: started(sidefx, "first"), 60, "end/first to start", d)
    other = Driver(backend, sidefx, tmp_path / "other.log", "--variant", "other", "--only", "end/second")
    assert other.wait() == 0, other.output()[-3000:]  # commits its own end/second at end/shared
    (sidefx / "go").touch()
    assert d.wait() == 1, d.output()[-3000:]
    found = assert_clean(backend, d, 1)
    assert found["long"]["state"] == "SUCCESS"
    assert "end/second failed" in d.output() and "refusing to touch it" in d.output()
    assert found["second"]["state"] == "SUCCESS" and found["second"]["owner"]["pid"] == other.pid  # untouched


@pytest.mark.parametrize("signals, code, reason", [
    ([signal.SIGINT], 130, "interrupted (Ctrl-C)"),
    ([signal.SIGINT, signal.SIGINT], 130, "interrupted (Ctrl-C)"),
    ([signal.SIGTERM], 143, "terminated (SIGTERM)"),
], ids=["ctrl-c", "double-ctrl-c", "sigterm"])
def test_signals(local, sidefx, tmp_path, signals, code, reason):
    signalled_run(local, sidefx, tmp_path, signals, code, reason)


@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_sigterm_on_s3(backend, sidefx, tmp_path):
    signalled_run(backend, sidefx, tmp_path, [signal.SIGTERM], 143, "terminated (SIGTERM)")


def signalled_run(backend, sidefx, tmp_path, signals, code, reason):
    d = Driver(backend, sidefx, tmp_path / "run.log", long="hang")
    wait_for(lambda: started(sidefx, "long"), 60, "end/long to start", d)
    wait_for(lambda: statuses(backend).get("second", {}).get("state") == "SUCCESS", 60, "end/second", d)
    for sig in signals:
        d.signal(sig)
    assert d.wait() == code, d.output()[-3000:]
    found = assert_clean(backend, d, code)
    assert found["long"]["state"] == "FAILED" and found["long"]["error"] == reason


@BOTH
def test_sigkill_then_a_fresh_runner_takes_over(backend, sidefx, tmp_path):
    d = Driver(backend, sidefx, tmp_path / "killed.log", long="hang")
    wait_for(lambda: started(sidefx, "long"), 60, "end/long to start", d)
    d.signal(signal.SIGKILL)
    d.wait()
    # the taker measures the dead holder's silence with its own TTL: a short one, not a 6 s wait
    fresh = Driver(backend, sidefx, tmp_path / "fresh.log", ttl=TAKER_TTL)
    assert fresh.wait() == 0, fresh.output()[-3000:]
    found = assert_clean(backend, fresh, 0)
    assert found["long"]["state"] == "SUCCESS" and found["long"]["attempt"] == 2
    assert "took over a stale lease" in fresh.output()


def test_step_timeout_ends_the_step_and_the_process(local, sidefx, tmp_path):
    d = Driver(local, sidefx, tmp_path / "run.log", long="hang", timeout_long="1")
    assert d.wait() == 1, d.output()[-3000:]
    found = assert_clean(local, d, 1)
    assert found["long"]["state"] == "FAILED" and "timed out after 1s" in found["long"]["error"]
    assert found["second"]["state"] == "SUCCESS"


def test_a_steps_own_keyboard_interrupt_is_its_error(local, sidefx, tmp_path):
    d = Driver(local, sidefx, tmp_path / "run.log", first="ki", long="sleep:1")
    assert d.wait() == 1, d.output()[-3000:]
    found = assert_clean(local, d, 1)
    assert found["first"]["state"] == "FAILED" and found["first"]["error"].startswith("KeyboardInterrupt")
    assert found["long"]["state"] == "SUCCESS"  # the sibling is not "interrupted"
