"""--cache-from on the commands that plan (issue 30): `stepgraph explain` and the experiment's
`--explain` say whether a run with it would copy a step and from where (and compare with the
cache-from prefixes' versions when the id differs); `stepgraph graph` draws that run's plan. Both
take the flag (repeatable) and EXECUTOR_CACHE_FROM, and write nothing. `gc`, `status`, `verify`,
`serve` and `report` read what is stored under the prefix, not a plan: they take no --cache-from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.executor.test_hello_ray import HELLO
from tests.tools.toy import run_file, run_main


@pytest.fixture(scope="module")
def hello_a(tmp_path_factory) -> tuple[Path, str]:
    """Prefix A with hello.py run once, and that run's id."""
    prefix = tmp_path_factory.mktemp("hello-a")
    code, out = run_file(HELLO, "--prefix", str(prefix), "--runner", "inline")
    assert code == 0, out
    return prefix, json.loads(next((prefix / "runs").glob("*.json")).read_text())["run_id"]


def test_explain_says_the_step_would_be_copied_and_from_where(hello_a, tmp_path):
    a, run_id = hello_a
    b = tmp_path / "b"
    code, out = run_main("explain", str(HELLO), "hello/summary", "--prefix", str(b),
                         "--cache-from", str(tmp_path / "empty"), "--cache-from", str(a))
    assert code == 0, out
    assert f"hello/summary: with --cache-from, copy from {a} (run {run_id}, 43 B)" in out, out
    assert f"id hello/summary-c73eafd61c0b is unchanged (found under cache-from {a})" in out, out
    code, out = run_main("explain", str(HELLO), "hello/shout", "--prefix", str(b), "--cache-from", str(a))
    assert code == 0 and f"hello/shout: with --cache-from, not needed here (copy from {a} (run {run_id}, " in out, out
    assert not b.exists()  # explain writes nothing


def test_explain_of_a_changed_step_says_it_runs_and_what_differs_from_the_cache_from_version(hello_a, tmp_path):
    a, _ = hello_a
    code, out = run_main("explain", str(HELLO), "hello/summary", "--prefix", str(tmp_path / "b"),
                         "--cache-from", str(a), "--", "--greeting", "Yo")
    assert code == 0, out
    assert "hello/summary: with --cache-from, run: new: no previous attempt; no SUCCESS of hello/summary-" in out
    assert f"hello/greeting: hello/greeting-202edf9a13b0 (cache-from {a}) -> hello/greeting-" in out, out
    assert "config.greeting: 'Hello' -> 'Yo'" in out, out


def test_the_experiment_explain_flag_reads_the_environment_variable(hello_a, tmp_path, monkeypatch):
    a, run_id = hello_a
    monkeypatch.setenv("EXECUTOR_CACHE_FROM", str(a))
    code, out = run_file(HELLO, "--prefix", str(tmp_path / "b"), "--explain", "hello/summary")
    assert code == 0 and f"with --cache-from, copy from {a} (run {run_id}, 43 B)" in out, out
    code, out = run_main("explain", str(HELLO), "hello/summary", "--prefix", str(tmp_path / "b"))
    assert code == 0 and f"with --cache-from, copy from {a}" in out, out
    monkeypatch.delenv("EXECUTOR_CACHE_FROM")
    code, out = run_file(HELLO, "--prefix", str(tmp_path / "b"), "--explain", "hello/summary")
    assert code == 0 and "with --cache-from" not in out and "unchanged (found in the ids file)" in out, out


def test_graph_draws_the_plan_of_a_run_with_cache_from(hello_a, tmp_path, monkeypatch):
    a, run_id = hello_a
    b = tmp_path / "b"
    picture = tmp_path / "plan.html"
    code, out = run_main("graph", str(HELLO), str(picture), "--prefix", str(b), "--cache-from", str(a))
    assert code == 0, out
    assert f"copy from {a} (run {run_id}, 43 B)" in picture.read_text()
    code, out = run_main("graph", str(HELLO), str(picture), "--prefix", str(b))
    assert code == 0 and "copy from" not in picture.read_text() and "new: no previous attempt" in picture.read_text()
    monkeypatch.setenv("EXECUTOR_CACHE_FROM", str(a))
    code, out = run_main("graph", str(HELLO), str(picture), "--prefix", str(b))
    assert code == 0 and f"copy from {a}" in picture.read_text()
    assert not b.exists()


def test_graph_draws_the_steps_set_aside_greyed_with_their_edges(hello_a, tmp_path):
    """Every step that reads hello's four upstream steps is copied: they are neither run nor copied,
    and the picture still shows them (the whole DAG), labelled "not needed" with their reasons."""
    import xml.etree.ElementTree as ET

    from executor.tools.draw import STANDBY_COLOR, STANDBY_LABEL

    a, run_id = hello_a
    svg = "{http://www.w3.org/2000/svg}"
    code, out = run_main("graph", str(HELLO), str(tmp_path / "plan.svg"), "--prefix", str(tmp_path / "b"),
                         "--cache-from", str(a))
    assert code == 0, out
    root = ET.parse(tmp_path / "plan.svg").getroot()
    nodes = {g.findall(f"{svg}text")[0].text: g for g in root.findall(f".//{svg}g[@class='node']")}
    assert set(nodes) == {"hello/words", "hello/count", "hello/greeting", "hello/shout", "hello/summary"}
    assert nodes["hello/summary"].get("data-action") == "copy"
    for name in ("hello/words", "hello/count", "hello/greeting", "hello/shout"):
        g = nodes[name]
        assert (g.get("data-action"), g.get("data-label"), g.find(f"{svg}rect").get("fill")) == \
            ("standby", STANDBY_LABEL, STANDBY_COLOR), name
        title = g.find(f"{svg}title").text  # the id, then the reason alone
        assert title.startswith(f"{name}-") and f"\nnot needed here (copy from {a} (run {run_id}, " in title, title
    assert len(root.findall(f".//{svg}path[@class='edge']")) == 4  # words->count, greeting->shout, both->summary
    code, out = run_main("graph", str(HELLO), str(tmp_path / "plan.html"), "--prefix", str(tmp_path / "b"),
                         "--cache-from", str(a))
    page = (tmp_path / "plan.html").read_text()
    assert code == 0 and page.count(f"<td>{STANDBY_LABEL}</td>") == 4 and f">{STANDBY_LABEL}</span>" in page
    _a_browser_draws_four_greyed_steps(tmp_path / "plan.html")


def _a_browser_draws_four_greyed_steps(page_path: Path) -> None:
    from tests.browser import chromium_browser

    with chromium_browser() as browser:
        page = browser.new_page()
        page.goto(page_path.as_uri())
        assert page.locator("g.node").count() == 5
        greyed = page.locator("g.node[data-action=standby] rect")
        assert greyed.count() == 4
        assert {greyed.nth(i).evaluate("r => getComputedStyle(r).fill") for i in range(4)} == {"rgb(208, 208, 208)"}
        box = greyed.first.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 20  # drawn, not just present


def test_the_own_prefix_as_a_source_is_a_usage_error(hello_a):
    a, _ = hello_a
    for command in (("explain", str(HELLO), "hello/summary"), ("graph", str(HELLO), str(a / "plan.html"))):
        code, out = run_main(*command, "--prefix", str(a), "--cache-from", str(a))
        assert code == 2 and "that is the run's own prefix" in out, out
