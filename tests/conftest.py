"""Shared test setup: Ray kept on loopback, skips turned into failures under CI=true, and no JAX
imported while collecting (files marked `jax` run after the others)."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest

# The session's one server of each emulator (tests/emulators.py: registered here only, so every
# conftest's or module's `gcs_emulator` / `s3_emulator` hands out the same one).
from tests.emulators import gcs_emulator_server, s3_emulator_server  # noqa: F401  (session fixtures)

# Ray probes cloud metadata addresses unless these are set and a bootstrap config exists in
# $HOME (shared/ENVIRONMENT.md). Tests get a private HOME so nothing outside the repo is touched.
_TEST_HOME = Path(__file__).resolve().parent.parent / "scratch" / "test-home"
_TEST_HOME.mkdir(parents=True, exist_ok=True)
(_TEST_HOME / "ray_bootstrap_config.yaml").write_text("{}\n")
os.environ["HOME"] = str(_TEST_HOME)
os.environ.update(
    RAY_USAGE_STATS_ENABLED="0",
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
    RAY_AUTH_MODE="disabled",
    RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
    GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
    # No cloud metadata server is asked where the runner is (executor/engine/transfers/runner_region.py): its
    # address is not loopback. The tests that ask serve one on loopback themselves.
    AWS_EC2_METADATA_DISABLED="true",
    NO_GCE_CHECK="true",
)
# One console width for every test and the processes it starts: rich tables and argparse help wrap
# at the terminal's width (COLUMNS), and no assertion may depend on the terminal the suite runs in
# (issue 35). A test about width sets its own (tools/test_one_command.py, tools/test_overview.py).
os.environ["COLUMNS"] = "200"


_JAX_IMPORTED_BY = pytest.StashKey[str]()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Notes the first test module whose import (at collection) imported JAX."""
    before = "jax" in sys.modules
    yield
    if not before and "jax" in sys.modules and _JAX_IMPORTED_BY not in collector.config.stash:
        collector.config.stash[_JAX_IMPORTED_BY] = collector.nodeid


def pytest_collection_finish(session):
    """Collecting imports no JAX (see pytest_collection_modifyitems for why); a module that does is named."""
    culprit = session.config.stash.get(_JAX_IMPORTED_BY, None)
    if culprit is not None:
        raise pytest.UsageError(
            f"collecting {culprit} imported JAX: import JAX (and steps.train, steps.eval, the experiments that "
            f"import them) inside the tests that use it and mark the file `pytestmark = pytest.mark.jax` "
            f"(tests/README.md): once JAX is imported, every inline-runner step of every later test spawns")


def pytest_collection_modifyitems(config, items):
    """Files marked `jax` run after all the others, in the same order otherwise (a stable sort; every
    xdist worker computes the same order, and `--dist loadfile --no-loadscope-reorder` hands out files
    in it: xdist's default re-sorts files by their number of tests; tests/test_jax_guard.py).

    Once JAX is imported into a process, the inline runner spawns each step's child instead of
    forking it (executor/engine/runner/inline.py `fork_is_unsafe`): a fresh interpreter per step,
    ~4x the CPU of a fork for the cutoff tests (issue 46). So JAX is imported only inside the tests
    that use it, never while collecting, and those files come last: a worker forks until then."""
    items.sort(key=lambda item: item.get_closest_marker("jax") is not None)


@pytest.fixture(autouse=True)
def _jax_imported_only_by_files_marked_jax(request):
    """A test that imports JAX into this process in a file not marked `jax` is warned about: it makes
    every later inline-runner step of this worker spawn (pytest_collection_modifyitems says why)."""
    before = "jax" in sys.modules
    yield
    if not before and "jax" in sys.modules and request.node.get_closest_marker("jax") is None:
        warnings.warn(f"{request.node.nodeid} imported JAX into the pytest process but its file is not marked "
                      f"`pytestmark = pytest.mark.jax` (tests/README.md): mark it, so that it runs after the "
                      f"files that do not import JAX", pytest.PytestWarning, stacklevel=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (skips are failures in CI): {report.longrepr}"


@pytest.fixture(scope="module")
def ray_local(ray_head):
    """This process connected to a real Ray cluster for a module's tests that only need *a* Ray to
    run steps or shard tasks on: the session's `ray_head` (one node, 4 CPUs), joined (~0.6 s), not an
    embedded cluster started per module (~5 s on a quiet 2-core machine, 16 s on a loaded one: issue 46).
    Tests of the embedded start itself start their own (tests/runner/test_environment_untouched.py,
    executor/test_hello_ray.py, runner/test_auto_runner.py).

    Module-scoped, so it is disconnected before the next module: a connection left open would make
    later tests that start or join their own cluster fail with "ray.init twice". The head's workers
    import the tests' code through this driver's sys.path (Ray hands it to the job's workers).
    """
    import ray

    ray.init(address=ray_head.address, log_to_driver=True)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_head():
    """One real `ray start --head` cluster for the session, started from its own directory and
    environment, with a custom resource `special` (routing). Tests join it from a driver process
    (RAY_ADDRESS) or connect to it in a module fixture; sharing it saves a cluster start each."""
    from tests.runner.raycluster import RayHead

    head = RayHead(num_cpus=4, resources='{"special": 1}')
    try:
        head.start()
    except RuntimeError as e:
        head.stop()
        pytest.fail(f"could not start a Ray head for the tests: {e}")
    yield head
    head.stop()


@pytest.fixture(autouse=True, scope="module")
def _no_ray_connection_leaks_out_of_a_module(request):
    """A module that leaves this process connected to Ray breaks the next one that starts its own."""
    yield
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
        pytest.fail(f"{request.module.__name__} left this process connected to Ray (shut it down in the test)")
