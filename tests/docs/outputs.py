"""Run the command a `<!-- output-of: COMMAND -->` block shows, the way the docs show it.

`stepgraph` is `python -m executor`, `python` this interpreter; commands run in the checkout at a
fixed terminal width. The path /tmp/docs-prefix stands for a fresh empty prefix. Regenerate every
such block after changing a help text with `uv run python -m tests.docs.outputs`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.docs.markdown import REPO, Block, all_blocks

PREFIX_PLACEHOLDER = "/tmp/docs-prefix"
COLUMNS = "100"


def command_output(command: str) -> str:
    argv = shlex.split(command)
    if argv[:2] == ["uv", "run"]:
        argv = argv[2:]
    program = {"stepgraph": [sys.executable, "-m", "executor"], "python": [sys.executable]}
    argv = [*program.get(argv[0], argv[:1]), *argv[1:]]
    env = {k: v for k, v in os.environ.items() if k not in ("EXECUTOR_PREFIX", "EXECUTOR_STORAGE_OPTIONS")}
    env.update(COLUMNS=COLUMNS, LINES="50", PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as prefix:
        argv = [a.replace(PREFIX_PLACEHOLDER, prefix) for a in argv]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        text = (done.stdout + done.stderr).replace(prefix, PREFIX_PLACEHOLDER)
    return normalized(text)


def normalized(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


def output_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.marker == "output-of"]


def regenerate_one() -> str | None:
    """Rewrite the first output-of block that differs from its command's output; where it was."""
    for block in output_blocks():
        fresh = command_output(block.marker_arg)
        if normalized(block.text) != fresh:
            lines = block.page.read_text().splitlines(keepends=True)
            end = next(j for j in range(block.line, len(lines)) if lines[j].strip().startswith("```"))
            lines[block.line:end] = [fresh]
            block.page.write_text("".join(lines))
            return block.where
    return None


if __name__ == "__main__":
    changed = []
    while (where := regenerate_one()) is not None:  # one at a time: a rewrite moves the lines below it
        changed.append(where)
    print("\n".join(changed) or "every output-of block is current")
