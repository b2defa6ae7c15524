"""Two promises of DESIGN §8 that nothing else held:

- `--force-failed` retries only the failures present in this invocation's *first* plan snapshot:
  a FAILED written meanwhile by another runner is reported, not retried again;
- `override_output_path` places the output under the prefix at that path, is not hashed, and is
  recorded (the record and the resolved config name the real location).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, execution_only, this_output_path
from executor.cli import run
from executor.core.record import State, parse_status

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "experiments" / "hello.py"


def shout_statuses(prefix: Path) -> list:
    return [parse_status(p.read_bytes(), str(p)) for p in prefix.glob("hello/shout-*/.executor/status.json")]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_failure_written_meanwhile_by_another_runner_is_not_retried(tmp_path):
    args = [sys.executable, str(HELLO), "--prefix", str(tmp_path), "--runner", "inline",
            "--fail-shout", "--pause-s", "4"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(s.state == State.RUNNING for s in shout_statuses(tmp_path)), 120,
                 "the first runner to take hello/shout")
        # The second runner's first snapshot sees shout RUNNING (a live lease): it waits on it.
        second = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert first.wait(timeout=240) == 1
    finally:
        if first.poll() is None:
            first.kill()
    out = second.stdout + second.stderr
    assert second.returncode == 1, out
    (status,) = shout_statuses(tmp_path)
    assert status.state == State.FAILED and status.attempt == 1, "the second runner retried a failure it did not plan"
    assert "hello/shout" in out and "failed in another runner" in out


@dataclass(frozen=True)
class PlaceConfig:
    output_path: str


def place(config: PlaceConfig) -> dict:
    Path(config.output_path, "here.txt").write_text("placed")
    return {}


def build_placed(override):
    def build(_options):
        return [ExecutorStep("placed/thing", place, PlaceConfig(this_output_path()), override_output_path=override)]
    return build


def test_override_output_path_places_records_and_is_not_hashed(tmp_path):
    rc = run(build_placed("shared/thing-v1"), "placed", argv=["--prefix", str(tmp_path), "--runner", "inline"],
             environ={}, main_file=__file__)
    assert rc == 0
    assert (tmp_path / "shared/thing-v1/here.txt").read_text() == "placed"
    assert not list(tmp_path.glob("placed/thing-*"))          # nothing at the default <name>-<hash>
    record = json.loads((tmp_path / "shared/thing-v1/.executor/record.json").read_text())
    assert record["config"]["output_path"] == str(tmp_path / "shared/thing-v1")
    assert record["step_id"].startswith("placed/thing-")
    # the same step with another override keeps its id: the override is not part of the identity
    rc = run(build_placed("shared/thing-v2"), "placed", argv=["--prefix", str(tmp_path), "--runner", "inline"],
             environ={}, main_file=__file__)
    assert rc == 0
    other = json.loads((tmp_path / "shared/thing-v2/.executor/record.json").read_text())
    assert other["step_id"] == record["step_id"] and other["digest"] == record["digest"]


class RefailsMeanwhile:
    """A store whose first read of one step's status, after the plan's snapshot, finds that another
    runner has meanwhile retried that FAILED step and failed again (attempt 2, a new generation)."""

    def __init__(self, inner, step_dir: str):
        self.inner, self.step_dir, self.done = inner, step_dir, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read(self, key):
        if not self.done and key.startswith(self.step_dir) and key.endswith("status.json"):
            self.done = True
            current = self.inner.read(key)
            status = parse_status(current.data, key)
            again = dataclasses.replace(status, attempt=status.attempt + 1, seq=status.seq + 1)
            assert self.inner.replace_if_generation(key, again.to_bytes(), current.generation) is not None
        return self.inner.read(key)


@dataclass(frozen=True)
class FlakyConfig:
    output_path: str
    fail: bool = execution_only(False)  # the same step id whether it fails or not


def flaky(config: FlakyConfig) -> dict:
    if config.fail:
        raise RuntimeError("flaky fails on purpose")
    Path(config.output_path, "ok.txt").write_text("ok")
    return {}


def build_flaky(fail: bool):
    def build(_options):
        return [ExecutorStep("flaky/step", flaky, FlakyConfig(this_output_path(), fail=fail))]
    return build


def test_a_failure_retried_and_failed_again_by_another_runner_meanwhile_is_not_retried(tmp_path, monkeypatch):
    """The first snapshot holds a FAILED step (so --force-failed plans to retry it); before this runner
    takes it, another runner retries it and fails again. That failure is not this invocation's to
    retry: reported as failed in another runner, its status left as that runner wrote it."""
    from executor.engine.prefix import location

    argv = ["--prefix", str(tmp_path), "--runner", "inline"]
    assert run(build_flaky(True), "flaky", argv=argv, environ={}, main_file=__file__) == 1
    (status_path,) = tmp_path.glob("flaky/step-*/.executor/status.json")
    opened = []
    open_raw = location.open_raw_store

    def opener(prefix, options=None):
        opened.append(RefailsMeanwhile(open_raw(prefix, options), f"flaky/{status_path.parent.parent.name}/"))
        return opened[-1]

    monkeypatch.setattr(location, "open_raw_store", opener)
    # the step would succeed now: only the first-snapshot generation check keeps it from a retry
    rc = run(build_flaky(False), "flaky", argv=argv, environ={}, main_file=__file__)
    assert any(store.done for store in opened), "the run read the step's status after its snapshot"
    status = parse_status(status_path.read_bytes(), str(status_path))
    assert (status.state, status.attempt) == (State.FAILED, 2)
    assert rc == 1
