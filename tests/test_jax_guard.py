"""The suite's own guard (tests/conftest.py): a test module that imports JAX while it is collected stops
the run, naming the module, since every later inline-runner step of that worker would then spawn."""

from __future__ import annotations

import subprocess
import sys
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
