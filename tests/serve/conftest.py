"""Prefixes the live-view tests serve: experiments/hello.py (plus a step that fails with markup in
its error), and the server started on them as a user starts it."""

from __future__ import annotations

from pathlib import Path

import pytest

try:  # the same module object the other suites use, so the session shares one emulator
    from emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures, started on first use)
except ImportError:
    from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401

from tests.browser import chromium_browser
from tests.serve import server

MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
BROKEN = f'''\
"""A step whose error message is markup: the live view must show it as text."""
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, this_output_path


@dataclass(frozen=True)
class Config:
    output_path: str


def explode(config):
    raise ValueError({MARKUP!r})


if __name__ == "__main__":
    executor_main(steps=[ExecutorStep("markup/explode", explode, Config(this_output_path()))],
                  description="markup in an error")
'''


def step_ids(prefix: Path) -> set[str]:
    """The step ids stored under a local prefix (its output dirs holding a status)."""
    return {str(p.parent.parent.relative_to(prefix)) for p in prefix.glob("*/*/.executor/status.json")}


def make_prefix(root: Path) -> Path:
    """hello.py ran, then the markup experiment failed, under root/prefix.

    Both run in-process (`--runner inline`: a Ray start takes a minute and times out on a loaded
    2-core machine), and the in-process runner keeps no attempt logs; so hello/summary's log is
    written here as a Ray worker writes it (`.executor/logs/attempt-1.log`, a header line, then
    what the step printed, which the run's own output shows)."""
    prefix = root / "prefix"
    done = server.run_experiment(server.EXPERIMENTS / "hello.py", str(prefix), "--runner", "inline")
    assert done.returncode == 0, done.stdout + done.stderr
    [printed] = [line for line in done.stdout.splitlines() if line.startswith("HELLO! The most common word")]
    [summary] = [p.parent.parent for p in prefix.glob("hello/summary-*/.executor/status.json")]
    log = summary / ".executor" / "logs" / "attempt-1.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"=== 2026-12-05T00:00:00Z hello/{summary.name} attempt 1 try 1 ===\n{printed}\n")
    broken = root / "broken.py"
    broken.write_text(BROKEN)
    failed = server.run_experiment(broken, str(prefix), "--runner", "inline")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    return prefix


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def hello(tmp_path_factory):
    """A module's own served prefix (make_prefix), made once per test module."""
    return make_prefix(tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="module")
def served(hello):
    """`stepgraph serve` on that prefix, started as a user starts it (tests/serve/server.py)."""
    running = server.start(str(hello))
    yield running
    running.stop()
