"""A lean install (issue 45, item 6): the executor alone installs and runs experiments/hello.py
without JAX, optax, matplotlib, numpy, jinja2 or the evaluation harness; a part that needs an
extra says which (`pip install 'stepgraph[train]'`).

The environment is built as a user's would be, from this checkout without extras: `uv sync
--no-dev --no-editable` into a fresh folder, offline from uv's cache (which the checkout's own
`uv sync` filled), the project built as a wheel (no editable link back to the checkout).
About 3 to 10 s here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from executor.core.extras import MissingExtra, require_extra

REPO = Path(__file__).resolve().parents[2]
OPTIONAL = ("jax", "optax", "matplotlib", "lm_eval", "numpy", "pyarrow", "tokenizers", "jinja2")


@pytest.fixture(scope="module")
def lean(tmp_path_factory) -> Path:
    """The python of a fresh environment holding the project without extras."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (run the tests with `uv run pytest`)")
    venv = tmp_path_factory.mktemp("lean") / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv), "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)
    if "UV_CACHE_DIR" not in env:  # the tests' private HOME (tests/conftest.py) would hide uv's cache
        user_home = {**env, "HOME": pwd.getpwuid(os.getuid()).pw_dir}
        env["UV_CACHE_DIR"] = subprocess.run([uv, "cache", "dir"], env=user_home, capture_output=True, text=True,
                                             check=True, timeout=60).stdout.strip()
    done = subprocess.run([uv, "sync", "--quiet", "--frozen", "--offline", "--no-dev", "--no-editable",
                           "--reinstall-package", "stepgraph", "--python", sys.executable],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return venv / "bin" / "python"


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "EXECUTOR_PREFIX")}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_the_core_alone_runs_hello(lean, tmp_path):
    found = _run(lean, "-c", "import importlib.util, json, executor; print(json.dumps([executor.__file__, "
                             f"[m for m in {OPTIONAL!r} if importlib.util.find_spec(m)]]))", cwd=tmp_path)
    where, present = json.loads(found.stdout)
    assert present == [] and str(REPO) not in where, (where, present)  # the installed wheel, nothing optional
    ran = _run(lean, str(REPO / "experiments" / "hello.py"), "--prefix", str(tmp_path / "out"), "--runner", "inline",
               cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    statuses = [json.loads(p.read_text())["state"] for p in (tmp_path / "out").glob("hello/*/.executor/status.json")]
    assert statuses == ["SUCCESS"] * 5, statuses


@pytest.mark.parametrize("code, extra", [
    ("import steps.train", "train"),
    ("from steps.eval import evaluate", "train"),
    ("import steps.tokenize", "data"),
    ("from steps.dedup import exact_dedup", "data"),
])
def test_a_step_needing_an_extra_names_it(lean, tmp_path, code, extra):
    done = _run(lean, "-c", code, cwd=tmp_path)
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr
    assert f"pip install 'stepgraph[{extra}]'" in done.stderr.splitlines()[-1], done.stderr[-1500:]


@pytest.mark.parametrize("args, extra", [
    (["serve", "--prefix", "{tmp}/p"], "serve"),
    (["graph", str(REPO / "experiments" / "hello.py"), "{tmp}/plan.png", "--prefix", "{tmp}/p"], "draw"),
])
def test_a_command_needing_an_extra_names_it_and_exits_2(lean, tmp_path, args, extra):
    done = _run(lean, "-m", "executor", *(a.format(tmp=tmp_path) for a in args), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"pip install 'stepgraph[{extra}]'" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_missing_extra_is_an_import_error_and_an_executor_error_naming_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jinja2" else real(name, *a))
    with pytest.raises(ImportError) as caught:
        require_extra("serve", "stepgraph serve", "json", "jinja2")
    assert isinstance(caught.value, MissingExtra) and caught.value.name == "jinja2"
    assert str(caught.value).startswith("stepgraph serve needs jinja2, which is not installed: "
                                        "pip install 'stepgraph[serve]'")
    require_extra("serve", "stepgraph serve", "json")  # all there: nothing raised


def test_the_import_time_bench_measures_each_entry_in_the_lean_environment(lean):
    """scripts/bench/import_time.py, one fresh interpreter per entry, against the lean install."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench" / "import_time.py"), "--repeats", "1",
                           "--json", "--python", str(lean)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)["figures"]
    assert set(figures) == {"import executor", "from executor import executor_main",
                            "import executor.__main__ (the CLI)", "import steps"}
    assert all(0 < f["median_ms"] < 60_000 for f in figures.values()), figures
