"""The run report: written beside the run file by a run that executes something, its DAG (coloured
by outcome), timeline (with a lease wait and a takeover), links and curves found by parsing the page;
`report` rebuilds the same page from local, S3 and GCS storage; a real browser renders it."""

from __future__ import annotations

import json
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from executor.__main__ import main
from executor.core.record import Owner, State, Status
from executor.engine.store import open_store
from executor.tools.loading import load_experiment
from tests.browser import chromium_browser

from .toy import run_file

EXPERIMENT = '''\
"""data -> train -> eval, and broken -> after (blocked): every outcome a report shows."""
import json
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, output_path_of, this_output_path
from executor.engine.prefix.location import open_file


@dataclass(frozen=True)
class Config:
    output_path: str
    input_path: str | None = None


def write(path, text):
    with open_file(path, "w") as f:
        f.write(text)


def make_data(config):
    write(config.output_path + "/data.txt", "hello")


def train(config):
    write(config.output_path + "/metrics.jsonl",
          "".join(json.dumps({"step": s, "loss": 4.0 / s}) + "\\n" for s in range(1, 6)))


def evaluate(config):
    write(config.output_path + "/results.json", json.dumps({"train_step": 5, "model": {"bits_per_byte": 2.5}}))


def broken(config):
    raise ValueError("broken on purpose")


data = ExecutorStep("r/data", make_data, Config(this_output_path()))
trained = ExecutorStep("r/train", train, Config(this_output_path(), output_path_of(data, "data.txt")))
evaluated = ExecutorStep("r/eval", evaluate, Config(this_output_path(), output_path_of(trained, "metrics.jsonl")))
bad = ExecutorStep("r/broken", broken, Config(this_output_path()))
after = ExecutorStep("r/after", make_data, Config(this_output_path(), output_path_of(bad)))

if __name__ == "__main__":
    executor_main(steps=[evaluated, after], description="report test")
'''


class Page(HTMLParser):
    """Every element as (tag, attributes), and the page's text."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and (cls is None or cls in a.get("class", "").split())]


def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "reported.py"
    path.write_text(EXPERIMENT)
    return path


def hold_lease_elsewhere(path: Path, prefix: str, name: str) -> None:
    """A RUNNING status for `name` from another runner that then goes quiet (a stale lease)."""
    node = next(n for n in load_experiment(path).graph.nodes.values() if n.name == name)
    status = Status(State.RUNNING, node.digest, node.step_id, seq=0, attempt=1,
                    owner=Owner("other-run", "other-host", 1, "someone"), written_at=time.time())
    assert open_store(prefix).create_if_absent(f"{node.output_rel}/.executor/status.json", status.to_bytes())


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """One run of the experiment (a stale lease to wait out, a failure, a block) and its report."""
    tmp_path = tmp_path_factory.mktemp("report")
    path, prefix = experiment(tmp_path), str(tmp_path / "prefix")
    hold_lease_elsewhere(path, prefix, "r/data")
    code, out = run_file(path, "--prefix", prefix, "--runner", "inline", "--lease-ttl", "1.5",
                         "--heartbeat-interval", "0.5")
    assert code == 1, out
    pages = list(Path(prefix, "runs").glob("*.html"))
    assert len(pages) == 1 and "report: " in out, out
    return prefix, pages[0]


def test_the_run_writes_a_report_beside_its_run_file(reported):
    prefix, page_path = reported
    assert page_path.with_suffix(".json").exists()
    page = Page(page_path.read_text())
    assert not page.find("script") and not page.find("link")  # self-contained: nothing to fetch
    nodes = {a["data-step-id"].rsplit("-", 1)[0]: a["data-label"] for a in page.find("g", "node")}
    assert nodes == {"r/data": "succeeded", "r/train": "succeeded", "r/eval": "succeeded",
                     "r/broken": "failed", "r/after": "blocked"}
    edges = {(a["data-from"].rsplit("-", 1)[0], a["data-to"].rsplit("-", 1)[0]) for a in page.find("path", "edge")}
    assert edges == {("r/data", "r/train"), ("r/train", "r/eval"), ("r/broken", "r/after")}


def test_the_timeline_shows_runs_a_lease_wait_and_the_takeover(reported):
    _, page_path = reported
    page = Page(page_path.read_text())
    bars = {a["data-step-id"].rsplit("-", 1)[0]: a["data-outcome"] for a in page.find("rect", "run-bar")}
    assert bars == {"r/data": "succeeded", "r/train": "succeeded", "r/eval": "succeeded", "r/broken": "failed"}
    waits = [a["data-step-id"].rsplit("-", 1)[0] for a in page.find("rect", "lease-wait")]
    assert waits == ["r/data"]
    rows = {a["data-step-id"].rsplit("-", 1)[0]: a["data-outcome"] for a in page.find("tr", "step")}
    assert rows["r/after"] == "blocked" and rows["r/broken"] == "failed"
    assert "#2 (takeover)" in "".join(page.text)  # the attempt after the stale one


def test_links_point_at_records_and_logs_relative_to_the_page(reported):
    prefix, page_path = reported
    hrefs = [a["href"] for a in Page(page_path.read_text()).find("a")]
    records = [h for h in hrefs if h.endswith("/.executor/record.json")]
    assert len(records) == 3  # the steps that succeeded (a record is written before the commit)
    for href in hrefs:
        assert href.startswith("../") and (page_path.parent / href).resolve().exists(), href


def test_curves_carry_the_training_loss_and_the_eval_bpb(reported):
    _, page_path = reported
    curves = {a["data-kind"]: json.loads(a["data-points"]) for a in Page(page_path.read_text()).find("svg", "curve")}
    assert curves["loss"] == [[s, 4.0 / s] for s in range(1, 6)]
    assert curves["bpb"] == [[5, 2.5]]


def test_report_command_rebuilds_the_same_page(reported, capsys):
    prefix, page_path = reported
    original = page_path.read_text()
    page_path.unlink()
    assert main(["report", "--prefix", prefix]) == 0
    assert page_path.read_text() == original
    assert str(page_path) in capsys.readouterr().out
    assert main(["report", "--prefix", prefix, "no-such-run"]) == 2


@pytest.mark.parametrize("backend", ["s3", "gcs"])
def test_report_rebuilds_from_object_storage(backend, request, tmp_path, monkeypatch, capsys):
    emulator = request.getfixturevalue(f"{backend}_emulator")
    prefix = emulator.fresh_prefix("report")
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(emulator.storage_options))
    code, out = run_file(experiment(tmp_path), "--prefix", prefix, "--runner", "inline")
    assert code == 1, out
    from executor.engine.prefix.location import url_to_fs

    fs, root = url_to_fs(prefix, **emulator.storage_options)
    fs.invalidate_cache()
    [page] = [p for p in fs.ls(f"{root}/runs", detail=False) if p.endswith(".html")]
    original = fs.cat_file(page)
    fs.rm_file(page)
    assert main(["report", "--prefix", prefix]) == 0, capsys.readouterr()
    fs.invalidate_cache()
    assert fs.cat_file(page) == original
    labels = sorted(a["data-label"] for a in Page(original.decode()).find("g", "node"))
    assert labels == ["blocked", "failed", "succeeded", "succeeded", "succeeded"]


def test_a_real_browser_renders_the_report(reported, tmp_path):
    _, page_path = reported
    with chromium_browser() as browser:
        page = browser.new_page()
        page.goto(page_path.as_uri())
        assert page.locator("g.node").count() == 5
        assert page.locator("svg.curve polyline").count() == 2
        assert page.locator("rect.lease-wait").count() == 1
        box = page.locator("svg.curve[data-kind=loss]").bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 5000
