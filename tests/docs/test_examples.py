"""Every Python example in the docs runs: blocks marked `<!-- runnable -->` are executed, in order,
one temporary folder per page (so a later block can import an earlier one's file), with the
checkout on PYTHONPATH and no EXECUTOR_PREFIX (the default prefix, cache/, lands in that folder).
Every other Python block must say why it cannot run alone (`<!-- not-runnable: WHY -->`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.docs.markdown import REPO, all_blocks, blocks, pages


def _runnable_pages():
    return [page for page in pages() if any(b.marker == "runnable" for b in blocks(page))]


def test_every_python_block_is_run_or_says_why_not():
    unmarked = [b.where for b in all_blocks() if b.language in ("python", "py") and b.marker is None]
    assert not unmarked, (f"Python blocks with neither <!-- runnable --> nor <!-- not-runnable: WHY --> "
                          f"on the line above: {unmarked}")
    excuses = [b.where for b in all_blocks() if b.marker == "not-runnable" and not b.marker_arg]
    assert not excuses, f"<!-- not-runnable --> needs a reason: {excuses}"


def test_the_readme_opens_with_a_runnable_example():
    first = next(b for b in blocks(REPO / "README.md") if b.language in ("python", "py"))
    assert first.marker == "runnable", f"{first.where}: the README's first Python example must be runnable"


@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_runnable_examples_run(page, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("EXECUTOR_PREFIX", "EXECUTOR_STORAGE_OPTIONS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for index, block in enumerate(b for b in blocks(page) if b.marker == "runnable"):
        name, argv = block.run_spec(index)
        (tmp_path / name).write_text(block.text)
        done = subprocess.run([sys.executable, name, *argv], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=240)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{output[-4000:]}"
        assert "Traceback" not in output, f"{block.where}:\n{output[-4000:]}"
