"""Fenced code blocks of the docs (docs/*.md and README.md), with the marker comment above each.

A block is marked by an HTML comment on the line right above its opening fence (invisible on
GitHub and in the built site):

    <!-- runnable [FILE.py] [ARGS...] -->     run it (saved as FILE.py, with ARGS); tests/docs/test_examples.py
    <!-- not-runnable: WHY -->                a Python fragment that cannot run alone, and why
    <!-- output-of: COMMAND -->               the block is COMMAND's output; tests/docs/test_outputs.py
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>runnable|not-runnable|output-of)\s*:?\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    marker: str | None  # runnable / not-runnable / output-of
    marker_arg: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def run_spec(self, index: int) -> tuple[str, list[str]]:
        """(file name, argv) of a runnable block: `<!-- runnable lengths.py --runner inline -->`."""
        words = shlex.split(self.marker_arg)
        if words and words[0].endswith(".py"):
            return words[0], words[1:]
        return f"example_{index}.py", words


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        if end is None:
            raise AssertionError(f"{page}:{i + 1}: a code fence that is never closed")
        body = "\n".join(line[len(indent):] for line in lines[i + 1:end]) + "\n"
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        language = opening["info"].strip().split(" ")[0] if opening["info"].strip() else ""
        found.append(Block(page, i + 1, language, body, marker["kind"] if marker else None,
                           marker["arg"] if marker else ""))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]
