"""`python -m executor doctor`: the prefix round trip on local, S3 and GCS, an unreachable prefix and
Ray address, and planted distributions shadowing the import names `executor` and `steps`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.__main__ import main
from executor.engine.prefix import location
from tests.emulators import free_port

# The doctor lists JAX's devices, importing JAX into this process: the `jax` marker runs this file after
# those that do not import JAX (tests/conftest.py; in-process inline runs fork until then).
pytestmark = pytest.mark.jax

ROOT = Path(__file__).resolve().parents[2]


def doctor(capsys, *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def line(out: str, check: str) -> str:
    return next(row for row in out.splitlines() if row[2:].startswith(check))


def test_local_prefix_round_trip_and_cleanup(tmp_path, capsys):
    prefix = tmp_path / "prefix"
    code, out = doctor(capsys, "--prefix", str(prefix))
    assert code == 0, out
    assert line(out, "prefix").startswith("✔") and "compare-and-swap work" in out
    assert line(out, "ray cluster").startswith("✔") and "embedded local cluster" in out
    assert line(out, "python").startswith("✔") and line(out, "jax ").startswith("✔") and "JAX device(s)" in out
    assert line(out, "import executor").startswith("✔") and str(ROOT / "executor") in out
    assert list(prefix.iterdir()) == []  # the scratch object and its lock are gone


def _object_store_round_trip(emulator, capsys):
    prefix = emulator.fresh_prefix("doctor")
    code, out = doctor(capsys, "--prefix", prefix, "--storage-options", json.dumps(emulator.storage_options))
    assert code == 0, out
    assert line(out, "prefix").startswith("✔") and prefix in out
    fs, path = location.url_to_fs(prefix, **emulator.storage_options)
    fs.invalidate_cache()
    assert fs.find(path) == []  # the scratch object was deleted


def test_s3_prefix_round_trip(s3_emulator, capsys):
    _object_store_round_trip(s3_emulator, capsys)


def test_gcs_prefix_round_trip(gcs_emulator, capsys):
    _object_store_round_trip(gcs_emulator, capsys)


def test_unreachable_prefix_and_ray_address_are_problems(s3_emulator, capsys):
    port = free_port()  # nothing listens there
    code, out = doctor(capsys, "--prefix", "s3://no-such-bucket-here/x", "--ray-address", f"127.0.0.1:{port}",
                       "--storage-options", json.dumps(s3_emulator.storage_options))
    assert code == 1, out
    assert line(out, "prefix").startswith("✘") and "no-such-bucket-here" in line(out, "prefix")
    assert line(out, "ray cluster").startswith("✘") and f"127.0.0.1:{port}" in line(out, "ray cluster")
    assert out.rstrip().endswith("2 problem(s)")


def plant_distribution(site: Path, import_name: str, dist_name: str) -> Path:
    """An installed-looking distribution `dist_name` 9.9 providing the package `import_name`."""
    package = site / import_name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("PLANTED = True\n")
    info = site / f"{dist_name}-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 9.9\n")
    (info / "top_level.txt").write_text(f"{import_name}\n")
    (info / "RECORD").write_text(f"{import_name}/__init__.py,,\n")
    return package / "__init__.py"


def run_doctor_with(tmp_path, python_path: str, append: str = "") -> subprocess.CompletedProcess:
    code = (f"import sys; sys.path.append({append!r}) if {bool(append)} else None; "
            "from executor.__main__ import main; sys.exit(main(['doctor', '--prefix', sys.argv[1]]))")
    env = {**os.environ, "PYTHONPATH": python_path}
    return subprocess.run([sys.executable, "-c", code, str(tmp_path / "prefix")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_a_planted_steps_package_that_wins_is_named_with_its_file_and_fix(tmp_path):
    site = tmp_path / "site"
    planted = plant_distribution(site, "steps", "steps")
    result = run_doctor_with(tmp_path, f"{site}{os.pathsep}{ROOT}")
    assert result.returncode == 1, result.stdout + result.stderr
    row = line(result.stdout, "import steps")
    assert row.startswith("✘") and f"loads {planted}" in row and "steps 9.9" in row and "pip uninstall steps" in row
    assert line(result.stdout, "import executor").startswith("✔")


def test_a_planted_executor_package_later_on_the_path_is_still_reported(tmp_path):
    site = tmp_path / "site"
    plant_distribution(site, "executor", "executor")
    result = run_doctor_with(tmp_path, str(ROOT), append=str(site))
    assert result.returncode == 1, result.stdout + result.stderr
    row = line(result.stdout, "import executor")
    assert row.startswith("✘") and "executor 9.9" in row and str(site / "executor") in row
    assert "wins if it comes earlier" in row and "pip uninstall executor" in row
