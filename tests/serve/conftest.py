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

    Both run with `--runner inline` (a Ray start takes a minute and times out on a loaded 2-core
    machine); the inline runner keeps each attempt's log (`.executor/logs/attempt-1.log`, a header
    line, then what the step printed), as a Ray worker does."""
    prefix = root / "prefix"
    done = server.run_experiment(server.EXPERIMENTS / "hello.py", str(prefix), "--runner", "inline")
    assert done.returncode == 0, done.stdout + done.stderr
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
