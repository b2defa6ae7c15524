"""docs/own-repository.md works as written (issue 47): a fresh project outside this checkout adds
stepgraph as the page says (`uv add --editable <checkout>`, a path dependency) and runs the
README's `words.py` there with `uv run`; its outputs land in that project's cache/.

The page's commands are read from its blocks marked `<!-- own-repository ... -->`, with this
checkout's path for `~/src/stepgraph`. uv runs offline first (its cache, warm from `uv sync`,
holds everything on a machine without network); where the cache lacks something it is asked
again with the network (CI has one). uv runs with the user's own HOME, where its cache is."""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from tests.docs.markdown import REPO

PAGE = REPO / "docs" / "own-repository.md"
PLACEHOLDER = "~/src/stepgraph"


def page_commands() -> list[list[str]]:
    """The commands of the page's marked bash blocks, in order."""
    text = PAGE.read_text()
    blocks = re.findall(r"<!-- own-repository[^>]*-->\n```bash\n(.*?)```", text, re.S)
    assert len(blocks) == 2, f"{PAGE}: expected the setup block and the run block, found {len(blocks)}"
    return [[w.replace(PLACEHOLDER, str(REPO)) for w in shlex.split(line, comments=True)]
            for block in blocks for line in block.splitlines() if shlex.split(line, comments=True)]


def readme_words_py() -> str:
    readme = (REPO / "README.md").read_text()
    [code] = re.findall(r"<!-- runnable words\.py[^>]*-->\n```python\n(.*?)```", readme, re.S)
    return code


def uv(words: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT", "EXECUTOR_PREFIX", "RAY_ADDRESS")}
    # the user's own HOME (tests/conftest.py gives the suite a private one): uv's cache is there
    env.update(HOME=pwd.getpwuid(os.getuid()).pw_dir, UV_PYTHON_DOWNLOADS="never")
    done = subprocess.run(words, cwd=cwd, env={**env, "UV_OFFLINE": "1"}, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0 and "offline" in (done.stderr + done.stdout).lower():
        done = subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return done


def test_a_fresh_project_outside_the_checkout_adds_stepgraph_and_runs_an_experiment(tmp_path):
    assert shutil.which("uv"), "uv is on PATH wherever the tests run (.ci/run installs it)"
    project = tmp_path / "my-experiments"
    project.mkdir()
    assert not project.resolve().is_relative_to(REPO)
    commands = page_commands()
    assert [c[:2] for c in commands] == [["uv", "init"], ["uv", "add"], ["uv", "run"]], commands
    for words in commands[:2]:
        done = uv(words, project)
        assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stdout}\n{done.stderr}"
    pyproject = (project / "pyproject.toml").read_text()
    assert '"stepgraph"' in pyproject and f'path = "{REPO}"' in pyproject, pyproject
    (project / "words.py").write_text(readme_words_py())
    done = uv(commands[2], project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2/2 step(s) succeeded" in done.stdout, done.stdout
    assert "No module named" not in done.stderr
    assert list((project / "cache" / "words").glob("count-*/.executor/record.json")), "outputs in the project's cache/"
    assert list((project / "cache" / "words").glob("count-*/.executor/logs/attempt-1.log"))
