"""The suite's own guard (tests/conftest.py): a test module that imports JAX while it is collected stops
the run, naming the module, since every later inline-runner step of that worker would then spawn."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def collect(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    module = tmp_path / "test_module.py"
    module.write_text(body + "\n\ndef test_nothing():\n    pass\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "--collect-only", "-q",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(module)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_module_importing_jax_when_collected_is_named_and_the_run_stops(tmp_path):
    done = collect(tmp_path, "import jax  # noqa: F401")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "test_module.py imported JAX" in done.stdout + done.stderr


def test_a_module_importing_no_jax_is_collected(tmp_path):
    done = collect(tmp_path, "import json  # noqa: F401")
    assert done.returncode == 0, done.stdout + done.stderr


def test_files_marked_jax_run_after_every_other_file_in_each_worker(tmp_path):
    """With the suite's own addopts (two xdist workers, a file at a time), each worker runs the files marked
    `jax` after all the others. xdist's default re-sorts files by their number of tests, which ran a large
    JAX file early in one worker and made that worker spawn every later inline step (`--no-loadscope-reorder`)."""
    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    jax: imports JAX\n    slow: slow\n")
    order = tmp_path / "order.log"
    note = (f"import os\n\ndef note():\n    with open({str(order)!r}, 'a') as f:\n"
            f"        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + __name__ + '\\n')\n")
    (tmp_path / "test_many_jax.py").write_text(
        "import pytest\npytestmark = pytest.mark.jax\n" + note +
        "".join(f"\ndef test_{i}():\n    note()\n" for i in range(8)))
    for name in "abcd":
        (tmp_path / f"test_{name}.py").write_text(note + "\ndef test_one():\n    note()\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", *shlex.split(addopts), "-q",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    by_worker: dict[str, list[str]] = {}
    for line in order.read_text().splitlines():
        worker, module = line.split()
        by_worker.setdefault(worker, []).append(module.rsplit(".", 1)[-1])
    assert len(by_worker) == 2 and sum(map(len, by_worker.values())) == 12, by_worker
    for worker, modules in by_worker.items():
        marked = [i for i, m in enumerate(modules) if m == "test_many_jax"]
        assert not marked or all(m == "test_many_jax" for m in modules[marked[0]:]), (worker, modules)
