"""Ids do not depend on how an experiment's module was loaded (issue 20): a class defined in a
script is named by its file (experiments.hello.WordsConfig), never `__main__`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from executor.core.naming import module_name_of_file, qualified_name

REPO = Path(__file__).resolve().parents[2]

COMPOSE = """
import sys
{path_setup}
from {module} import HelloOptions, build
from executor import executor_main

if __name__ == "__main__":
    executor_main(build, "hello, composed", config=HelloOptions())
"""


def _ids(command: list[str], prefix: Path, cwd: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(command + ["--dry-run", "--json", "--prefix", str(prefix)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return {row["name"]: row["digest"] for row in json.loads(out.stdout)["steps"]}


def test_a_second_experiment_importing_hellos_steps_gets_identical_ids(tmp_path):
    as_script = _ids([sys.executable, str(REPO / "experiments/hello.py")], tmp_path / "p", REPO)
    assert len(as_script) == 5
    by_package = tmp_path / "by_package.py"
    by_package.write_text(COMPOSE.format(path_setup="", module="experiments.hello"))
    by_directory = tmp_path / "by_directory.py"  # the spelling of a file next to hello.py: `from hello import`
    by_directory.write_text(COMPOSE.format(path_setup=f"sys.path.insert(0, {str(REPO / 'experiments')!r})",
                                           module="hello"))
    assert _ids([sys.executable, str(by_package)], tmp_path / "p", tmp_path) == as_script
    assert _ids([sys.executable, str(by_directory)], tmp_path / "p", tmp_path) == as_script
    assert _ids([sys.executable, "-m", "experiments.hello"], tmp_path / "p", REPO) == as_script


def test_the_identity_names_the_module_by_its_file(tmp_path):
    plan = json.loads((REPO / "experiments/hello.plan.json").read_text())
    assert "__main__" not in json.dumps(plan)
    assert module_name_of_file(str(REPO / "experiments/hello.py")) == "experiments.hello"
    assert module_name_of_file(str(REPO / "steps/train/config.py")) == "steps.train.config"
    loose = tmp_path / "loose.py"  # not in a package: its stem
    assert module_name_of_file(str(loose)) == "loose"


def test_classes_of_installed_packages_keep_their_declared_names():
    import collections

    import json as json_module

    assert qualified_name(collections.OrderedDict) == "collections.OrderedDict"
    assert qualified_name(json_module.JSONDecoder) == "json.decoder.JSONDecoder"


PROFILED = textwrap.dedent("""
    import dataclasses, json, sys
    from executor.core.graph import build_graph
    from executor import ExecutorStep

    @dataclasses.dataclass(frozen=True)
    class C:
        x: int = 1

    node = next(iter(build_graph([ExecutorStep("s", print, C())]).nodes.values()))
    print(node.identity["config"]["dataclass"])
""")


def test_a_script_run_under_another_tools_main_is_named_by_its_file(tmp_path):
    script = tmp_path / "exp.py"
    script.write_text(PROFILED)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plain = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    profiled = subprocess.run([sys.executable, "-m", "cProfile", "-o", os.devnull, str(script)], env=env,
                              capture_output=True, text=True, timeout=120)
    assert plain.stdout.strip() == profiled.stdout.strip() == "exp.C", (plain.stderr, profiled.stderr)
