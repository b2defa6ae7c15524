"""The docs call what a plan decides per step an *action*, as the plan's table, its JSON and the
command line's --help do (issue 47: the glossary said "decision"). `StepReport.decision`, the Python
API's field holding the action, is the one place the word stays, written as code."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.docs.markdown import REPO

PAGES = ["docs/concepts.md", "docs/cli.md", "docs/getting-started.md", "README.md"]


def _prose(text: str) -> str:
    """The page without code: fenced blocks and `code spans` (field names such as `decision`)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


@pytest.mark.parametrize("page", PAGES)
def test_the_docs_say_action(page):
    found = re.findall(r"[^\n]*\bdecisions?\b[^\n]*", _prose((REPO / page).read_text()), flags=re.I)
    assert not found, f"{page}: say 'action' (the plan's word), not 'decision':\n" + "\n".join(found)


def test_the_glossary_names_the_plan_s_word_as_the_plan_prints_it(tmp_path):
    concepts = (REPO / "docs" / "concepts.md").read_text()
    assert "- **Action** (the plan" in concepts
    done = subprocess.run([sys.executable, "experiments/hello.py", "--dry-run", "--json", "--prefix", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {step["action"] for step in json.loads(done.stdout)["steps"]} == {"run"}
    helped = subprocess.run([sys.executable, "experiments/hello.py", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=120).stdout
    assert "an action and a reason per step" in helped
