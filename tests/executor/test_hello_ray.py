"""experiments/hello.py through the real CLI, in subprocesses: a first run on a real embedded Ray cluster
(what `--runner ray` starts), the change-fail-retry runs on the session's Ray head (tests/conftest.py
`ray_head`: two cluster starts saved, issue 46; the Ray runner's failure and retry are the same there)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from executor.core.record import State, parse_status

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "experiments" / "hello.py"


def cli(prefix: Path, *args: str, address: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """An embedded cluster without `address`; with one, the driver joins it (its workers import the
    code from the driver's sys.path, on this machine: nothing shipped)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if address:
        env.update(RAY_ADDRESS=address, EXECUTOR_SHIP_CODE="0")
    return subprocess.run([sys.executable, str(HELLO), "--prefix", str(prefix), "--runner", "ray", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def states(prefix: Path) -> dict[str, list[tuple[State, int]]]:
    found: dict[str, list] = {}
    for path in sorted(prefix.glob("hello/*/.executor/status.json")):
        status = parse_status(path.read_bytes(), str(path))
        found.setdefault(status.step_id.rsplit("-", 1)[0], []).append((status.state, status.attempt))
    return found


def test_hello_on_ray_run_rerun_change_fail_and_retry(tmp_path, ray_head):
    first = cli(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "starting Ray" in first.stdout
    # piped (as in CI): the target step's own words reach the log once (forwarded by Ray, or echoed from
    # its attempt log when forwarding could not be confirmed), and a per-step table ends the run
    forwarded = any(line.startswith("(hello/summary") and "The most common word is 'the'" in line
                    for line in first.stdout.splitlines())
    echoed = "output of hello/summary" in first.stdout
    assert forwarded != echoed, first.stdout
    assert "this run" in first.stdout and "summary=HELLO!" in first.stdout
    assert all(v == [(State.SUCCESS, 1)] for v in states(tmp_path).values()) and len(states(tmp_path)) == 5

    again = cli(tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert "starting Ray" not in again.stdout, "a no-op re-run must not start Ray"

    # a hashed change plus a failure in that branch: words/count are untouched, summary blocked
    failing = cli(tmp_path, "--greeting", "Howdy", "--fail-shout", address=ray_head.address)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert f"joining Ray cluster at {ray_head.address}" in failing.stdout, failing.stdout
    assert "hello/summary blocked" in failing.stdout
    now = states(tmp_path)
    assert now["hello/words"] == [(State.SUCCESS, 1)] and now["hello/count"] == [(State.SUCCESS, 1)]
    assert sorted(now["hello/greeting"]) == [(State.SUCCESS, 1)] * 2
    assert (State.FAILED, 1) in now["hello/shout"]

    # --force-failed (on by default) retries the failed step; its dependents then run
    retry = cli(tmp_path, "--greeting", "Howdy", address=ray_head.address)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert f"joining Ray cluster at {ray_head.address}" in retry.stdout, retry.stdout
    final = states(tmp_path)
    assert sorted(final["hello/shout"]) == [(State.SUCCESS, 1), (State.SUCCESS, 2)]
    assert len(final["hello/summary"]) == 2 and all(s == State.SUCCESS for s, _ in final["hello/summary"])
    summary = sorted(tmp_path.glob("hello/summary-*/summary.txt"))
    assert any("HOWDY!" in p.read_text() for p in summary)
