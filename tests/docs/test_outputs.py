"""Every command the docs show with its output (`<!-- output-of: COMMAND -->`) prints exactly that
today, so a changed help text or message fails here until the docs are regenerated
(`uv run python -m tests.docs.outputs`)."""

from __future__ import annotations

import pytest

from tests.docs.markdown import REPO
from tests.docs.outputs import command_output, normalized, output_blocks


@pytest.mark.parametrize("block", output_blocks(), ids=lambda b: f"{b.where} {b.marker_arg}")
def test_shown_output_is_what_the_command_prints(block):
    assert normalized(block.text) == command_output(block.marker_arg), (
        f"{block.where}: `{block.marker_arg}` prints something else now; "
        f"run `uv run python -m tests.docs.outputs` and review the diff")


def test_the_reference_shows_the_help_of_every_command_line():
    shown = {b.marker_arg for b in output_blocks() if b.page == REPO / "docs" / "cli.md"}
    assert {"stepgraph --help", "python experiments/hello.py --help"} <= shown
