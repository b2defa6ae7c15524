"""The plan's picture: node count, colours by decision, labels and hover titles; PNG renders."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from executor.tools.draw import COLORS, draw_plan
from executor.core.errors import ExecutorError
from executor.core.plan import Action

SVG = "{http://www.w3.org/2000/svg}"


def test_dry_run_draws_html_svg_and_png(ran_toy, tmp_path):
    ran_toy.write(LR="0.5")  # train and report re-addressed: two run, two skip
    code, out = ran_toy.run("--dry-run", "--graph", str(tmp_path / "plan.svg"))
    assert code == 0 and "graph written to" in out
    root = ET.parse(tmp_path / "plan.svg").getroot()
    nodes = root.findall(f".//{SVG}g[@class='node']")
    assert len(nodes) == 4
    by_name = {}
    for g in nodes:
        label = g.findall(f"{SVG}text")[0].text
        by_name[label] = (g.get("data-action"), g.find(f"{SVG}rect").get("fill"), g.find(f"{SVG}title").text)
    assert set(by_name) == {"toy/raw", "toy/tokenize", "toy/train", "toy/report"}
    assert by_name["toy/raw"][:2] == ("skip", COLORS[Action.SKIP])
    assert by_name["toy/train"][:2] == ("run", COLORS[Action.RUN])
    assert by_name["toy/train"][2].startswith("toy/train-") and "new: no previous attempt" in by_name["toy/train"][2]
    assert len(root.findall(f".//{SVG}path[@class='edge']")) == 3

    assert ran_toy.run("--dry-run", "--graph", str(tmp_path / "plan.html"))[0] == 0
    page = (tmp_path / "plan.html").read_text()
    assert page.count('class="node"') == 4 and "<title>" in page and "toy/report-" in page

    assert ran_toy.run("--dry-run", "--graph", str(tmp_path / "plan.png"))[0] == 0
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(tmp_path / "plan.png").convert("RGB")).astype(int)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 200
    for action, boxes in ((Action.RUN, 2), (Action.SKIP, 2)):
        rgb = [int(COLORS[action][i:i + 2], 16) for i in (1, 3, 5)]
        filled = (abs(pixels - rgb) <= 3).all(axis=-1).sum()
        assert filled > boxes * 3000, (action, filled)  # two boxes of each decision, in its colour


def test_unknown_picture_format_is_a_clear_error(tmp_path):
    with pytest.raises(ExecutorError, match="use a .html, .svg or .png"):
        draw_plan(None, tmp_path / "plan.pdf")


def test_a_long_chain_with_its_upstream_half_set_aside_is_laid_out_in_order():
    """Set-aside steps (--cache-from) come after the plan's decisions though they lie upstream; a
    chain of 3,000 steps is deeper than Python's recursion limit."""
    from types import SimpleNamespace

    from executor.tools.draw import layout

    def step(i: int) -> SimpleNamespace:
        node = SimpleNamespace(name=f"s{i}", step_id=f"s{i}-{i:012x}", deps=(f"d{i - 1}",) if i else (), weak_deps=())
        return SimpleNamespace(node=node, action=Action.RUN if i < 1500 else Action.COPY, reason="r")

    plan = SimpleNamespace(decisions={f"d{i}": step(i) for i in range(1500, 3000)},
                           standby={f"d{i}": step(i) for i in range(1500)})
    boxes, edges, _, height = layout(plan)
    rows = {b.name: b.y for b in boxes}
    assert [rows[f"s{i}"] for i in range(3000)] == sorted(rows.values()) and len(set(rows.values())) == 3000
    assert {b.name for b in boxes if b.standby} == {f"s{i}" for i in range(1500)} and len(edges) == 2999
