"""gc deletes the lineage markers (executor/engine/prefix/lineage_marks.py) of the outputs it deletes and
of statuses re-written since their commit, and leaves those that still count and the edges index."""

from __future__ import annotations

import json
from pathlib import Path

from executor.engine.prefix.lineage_marks import CONSUMERS_DIR, OUTPUTS_DIR, parse
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.store import open_store
from executor.tools.lineage import lineage_down
from executor.tools.loading import load_experiment

from .toy import run_main


def _ids(toy) -> dict[str, str]:
    return {n.name: n.step_id for n in load_experiment(toy.path).graph.nodes.values()}


def _marked(prefix: str) -> dict[str, str]:
    """Marker key -> the rel it speaks for, every marker under the prefix."""
    keys = open_store(prefix).list_generations("lineage/", "")
    found = {}
    for key in keys:
        folder = next((f for f in (OUTPUTS_DIR, CONSUMERS_DIR) if key.startswith(f)), None)
        if folder:
            found[key] = parse(key, folder).rel
    return found


def test_gc_deletes_the_markers_of_what_it_deletes_and_of_statuses_rewritten_since(toy):
    """v1 ran, then v2 (a new vocabulary: tokenize, train and report get new ids; raw is shared). gc
    deletes v1's three outputs and their markers; v2's markers stay and still answer `lineage --down`
    without a read. A status re-written since its commit (train's, by hand) leaves its markers naming a
    generation no status holds: gc deletes those too, and the walk reads that output instead."""
    v1 = _ids(toy)
    assert toy.run("--runner", "inline")[0] == 0
    toy.write(VOCAB="8192")
    v2 = _ids(toy)
    assert toy.run("--runner", "inline")[0] == 0
    gone = {v1["toy/tokenize"], v1["toy/train"], v1["toy/report"]}
    before = _marked(toy.prefix)
    assert gone <= set(before.values()) and set(v2.values()) <= set(before.values())
    status = Path(toy.prefix, v2["toy/train"], ".executor", "status.json")
    written = json.loads(status.read_text())
    status.write_text(json.dumps({**written, "written_at": written["written_at"] + 1}))  # a generation no marker names
    Path(toy.prefix, "lineage", "edges.json").write_text("{}")  # the edges index: not gc's

    code, out = run_main("gc", "--prefix", toy.prefix, str(toy.path), "--delete", "--grace-hours", "0")
    assert code == 0, out
    stale = {key for key, rel in before.items() if rel in gone or rel == v2["toy/train"]}
    assert len(stale) == 3 + 1  # one marker each (each reads one output): v1's 3 outputs, v2's train
    after = _marked(toy.prefix)
    assert set(after) == set(before) - stale
    assert f"deleted {len(stale)} lineage marker(s)" in out
    assert Path(toy.prefix, "lineage", "edges.json").read_text() == "{}"

    down = lineage_down(PrefixView.open(toy.prefix), v2["toy/raw"])
    assert [n.rel for n in down.nodes] == [v2["toy/raw"], v2["toy/tokenize"], v2["toy/train"], v2["toy/report"]]
    assert down.cost["reads"] == 1 + 2  # the (empty) edges index, then train's status and record
