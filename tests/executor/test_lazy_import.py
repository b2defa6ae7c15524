"""The package root imports lazily: a Ray worker running a step loads no command line, API or flags.

Each check runs in a fresh interpreter, as a worker starts, and lists the `executor` modules it
loaded. Before the lazy root (PEP 562 `__getattr__` in executor/__init__.py) a worker loading the
step-running module pulled in 35 of them, the CLI, the API and the flags parser among them.
"""

from __future__ import annotations

import json
import subprocess
import sys

# What a worker imports to run a step: the remote functions (by reference) and run_call.
WORKER = "import executor.engine.runner.ray_tasks, executor.engine.runner.inline"
DRIVER_ONLY = {"executor.cli", "executor.api", "executor.flags", "executor.engine.run.execute", "executor.tools.console_reporter"}
WORKER_BOUND = 20  # 16 when this test was written; a new import past the bound is a decision to make here


def executor_modules(code: str) -> set[str]:
    listing = "import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'executor')))"
    done = subprocess.run([sys.executable, "-c", f"{code}\n{listing}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_a_worker_running_a_step_imports_no_cli_api_or_flags():
    modules = executor_modules(WORKER)
    assert not modules & DRIVER_ONLY, sorted(modules & DRIVER_ONLY)
    assert not any(m.startswith("executor.tools") for m in modules), sorted(modules)
    assert "executor.engine.runner.ray_tasks" in modules  # the listing sees what was imported
    assert len(modules) <= WORKER_BOUND, f"{len(modules)} executor modules in a worker: {sorted(modules)}"


def test_importing_the_package_imports_nothing_else_until_a_name_is_used():
    assert executor_modules("import executor") == {"executor"}
    used = executor_modules("from executor import ExecutorStep, map_shards, open_file")
    assert not used & DRIVER_ONLY, sorted(used & DRIVER_ONLY)
    assert "executor.cli" in executor_modules("from executor import executor_main")


def test_every_public_name_has_a_home_module():
    import executor

    assert set(executor._HOME) == set(executor.__all__)


def test_an_unknown_name_is_an_attribute_error():
    done = subprocess.run([sys.executable, "-c", "import executor; executor.no_such_name"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "module 'executor' has no attribute 'no_such_name'" in done.stderr
