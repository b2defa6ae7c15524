"""Lineage from records alone: up to the raw inputs (through an adoption, a --cache-from copy and a
tag), down to everything that consumed an output (adopted ids included), with its cost counted."""

from __future__ import annotations

import time
from pathlib import Path

from executor import api
from executor.core.graph import build_graph
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.store import open_store
from executor.engine.prefix.prefixes import open_prefix
from executor.tools.adopt import adopt
from executor.tools.lineage import lineage_down, lineage_up
from executor.tools.tags import tag

from .names_steps import pipeline, reader_of

WHO = {"user": "t", "host": "h", "pid": 1}


def _run(steps, prefix, **kw):
    result = api.run(steps, prefix=prefix, runner="inline", **kw)
    assert result.ok, result.failed
    return result


def test_lineage_up_and_down_across_an_adoption_a_cache_copy_and_a_tag(tmp_path):
    source, here = str(tmp_path / "source"), str(tmp_path / "here")
    raw, tok, train = pipeline("old text")
    made = _run([train], source)
    ids = {s.name: s.step_id for s in made.steps}

    # here: raw's config changes (a new id) and is adopted from the old output; tok and train then
    # get new ids and run here, reading the adopted output
    raw2, tok2, train2 = pipeline("old  text")
    _run([raw], here, cache_from=(source,))  # the old raw copied here from source
    adoption = adopt(build_graph([train2]), "names/raw", ids["names/raw"], open_prefix(here), reason="whitespace", declared_by=WHO,
                     force=True)
    assert adoption is not None
    again = _run([train2], here)
    new = {s.name: s.step_id for s in again.steps}
    tag(open_store(here), new["names/tok"], "tok@1", by=WHO)
    reader = reader_of("tok@1")
    _run([reader], here)
    reader_id = api.plan([reader], prefix=here).step(reader).step_id

    up = lineage_up(PrefixView.open(here), reader_id)
    walked = [(n.rel, n.prefix, n.via) for n in up.nodes]
    assert walked == [
        (reader_id, here, None),
        (new["names/tok"], here, "tag tok@1"),
        (new["names/raw"], here, "dependency"),
        (ids["names/raw"], here, "adopted from"),
        (ids["names/raw"], source, "copied from"),  # followed to the prefix it was made in
    ]
    assert up.cost["reads"] >= len(up.nodes)

    down = lineage_down(PrefixView.open(here), ids["names/raw"])
    walked = [(n.rel, n.via, n.depth) for n in down.nodes]
    assert walked[:3] == [(ids["names/raw"], None, 0), (new["names/raw"], "adopted as", 1),
                          (new["names/tok"], "consumed by", 2)]
    assert sorted(walked[3:]) == sorted([(new["names/train"], "consumed by", 3), (reader_id, "reads tag tok@1", 3)])
    # every output committed here left its markers but the adoption (written by `adopt`, not a
    # commit): the statuses' and the markers' listings, and the edges
    # index for the adoption alone (one read of the index, one of its status: an alias has no record)
    assert down.cost == {"listings": 2, "reads": 1 + 1}
    again = lineage_down(PrefixView.open(here), ids["names/raw"])
    assert [(n.rel, n.via, n.depth) for n in again.nodes] == walked
    assert again.cost == {"listings": 2, "reads": 1}  # the adoption now from the index


def _forget_markers(prefix: str) -> None:
    """The prefix as an executor of before lineage markers left it (executor/engine/prefix/lineage_marks.py)."""
    import shutil

    shutil.rmtree(Path(prefix, "lineage", "outputs"), ignore_errors=True)
    shutil.rmtree(Path(prefix, "lineage", "consumers"), ignore_errors=True)


def test_lineage_down_reads_again_only_what_changed_since_its_index_and_is_never_behind(tmp_path):
    """Outputs without markers (committed before them) come from the index
    (executor/tools/lineage_index.py), which holds each output's status generation: a new consumer, a
    re-written status and a status deleted since are seen at once, each read once."""
    here = str(tmp_path / "here")
    raw, tok, train = pipeline()
    ids = {s.name: s.step_id for s in _run([tok], here).steps}
    _forget_markers(here)
    view = PrefixView.open(here)
    assert [n.rel for n in lineage_down(view, ids["names/raw"]).nodes] == [ids["names/raw"], ids["names/tok"]]

    ids.update({s.name: s.step_id for s in _run([train], here).steps})  # a new consumer since the index
    _forget_markers(here)
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"], ids["names/train"]]
    assert down.cost == {"listings": 2, "reads": 1 + 2}  # the index, then train's status and record

    status = Path(here, ids["names/train"], ".executor", "status.json")
    status.write_text(status.read_text().replace('"state": "SUCCESS"', '"state": "FAILED"'))
    down = lineage_down(view, ids["names/raw"])
    assert [(n.rel, n.state) for n in down.nodes][-1] == (ids["names/train"], "FAILED")  # its generation moved
    status.unlink()
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"]] and down.cost["reads"] == 1

    Path(here, "lineage", "edges.json").write_text("{not json")  # a damaged index is rebuilt, never trusted
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"]] and down.cost["reads"] == 1 + 2 + 2


def test_lineage_up_stops_at_an_unreadable_copy_source(tmp_path):
    source, here = str(tmp_path / "source"), str(tmp_path / "here")
    raw, tok, _ = pipeline()
    _run([tok], source)
    _run([tok], here, cache_from=(source,))
    import shutil

    shutil.rmtree(source)
    ids = {s.name: s.step_id for s in api.plan([tok], prefix=here).steps}
    up = lineage_up(PrefixView.open(here), ids["names/tok"])
    # the copy's own record stands: its dependency is named, though that prefix is gone
    assert [(n.rel, n.via) for n in up.nodes][:1] == [(ids["names/tok"], None)]


class CountingStore:
    """The prefix's store, counting what lineage asks of it (the test's wrapper, not the product's)."""

    def __init__(self, store):
        self.store, self.reads, self.listings = store, [], []

    def read(self, key):
        self.reads.append(key)
        return self.store.read(key)

    def read_many(self, keys):
        self.reads.extend(keys)
        return self.store.read_many(keys)

    def list_generations(self, prefix, suffix):
        self.listings.append(prefix)
        return self.store.list_generations(prefix, suffix)

    def __getattr__(self, name):
        return getattr(self.store, name)


def counted(prefix: str, options=None) -> tuple[PrefixView, CountingStore]:
    store = CountingStore(open_store(prefix, options))
    return PrefixView(store, prefix), store


def test_a_first_walk_down_lists_the_markers_commits_left_and_reads_no_status_or_record(tmp_path):
    """A fresh prefix (no edges index): the walk lists the statuses and `lineage/`; nothing is read,
    however many outputs the prefix holds. A re-run status (its generation moved) is read alone; an
    output gc deleted is not named, and an output missing one of its markers is read."""
    from executor.tools.gc import collect, sweep

    here = str(tmp_path / "here")
    raw, tok, train = pipeline()
    others = [pipeline(f"other {i}")[2] for i in range(3)]  # nine outputs the walk does not reach
    ids = {s.name: s.step_id for s in _run([train], here).steps}
    _run(others, here)
    view, store = counted(here)
    down = lineage_down(view, ids["names/raw"])
    assert [(n.rel, n.via, n.state) for n in down.nodes] == [
        (ids["names/raw"], None, "SUCCESS"), (ids["names/tok"], "consumed by", "SUCCESS"),
        (ids["names/train"], "consumed by", "SUCCESS")]
    assert store.reads == [] and down.cost == {"listings": 2, "reads": 0}
    assert store.listings == ["", "lineage/"]
    assert not Path(here, "lineage", "edges.json").exists()

    status = Path(here, ids["names/train"], ".executor", "status.json")  # re-written since its commit
    status.write_text(status.read_text().replace('"state": "SUCCESS"', '"state": "FAILED"'))
    view, store = counted(here)
    down = lineage_down(view, ids["names/raw"])
    assert [(n.rel, n.state) for n in down.nodes][-1] == (ids["names/train"], "FAILED")
    assert sorted(store.reads) == sorted(["lineage/edges.json", f"{ids['names/train']}/.executor/status.json",
                                          f"{ids['names/train']}/.executor/record.json"])

    opened = open_prefix(here)  # gc deletes train: its markers name a generation no status has
    report = collect(opened, {ids["names/raw"]: "root", ids["names/tok"]: "root",
                              **{s.step_id: "root" for o in others for s in api.plan([o], prefix=here).steps}})
    sweep(report, opened, grace_hours=0, now=time.time() + 60)
    assert not Path(here, ids["names/train"]).exists()
    view, store = counted(here)
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"]]
    assert store.reads == []  # every output left is marked: not even the index is read

    # a commit made from two outputs leaves two markers, each saying so: one missing, the output is read
    tok_marker = next(k for k in open_store(here).list_generations("lineage/consumers/", "")
                      if ids["names/tok"].replace("/", "%2F") in k)
    assert tok_marker.endswith(",consumed%20by,1")
    Path(here, tok_marker).rename(Path(here, tok_marker[:-1] + "2"))  # as if its second write had failed
    view, store = counted(here)
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"]]
    assert sorted(store.reads) == sorted(["lineage/edges.json", f"{ids['names/tok']}/.executor/status.json",
                                          f"{ids['names/tok']}/.executor/record.json"])


def test_a_marker_that_cannot_be_written_is_a_warning_and_the_walk_reads_that_output_instead(tmp_path):
    """`<prefix>/lineage` is a file: no marker (nor the edges index) can be written there. The steps
    still commit, a warning names each, and the walk reads their statuses and records."""
    from executor.engine.events import LogLine

    here = tmp_path / "here"
    here.mkdir()
    (here / "lineage").write_text("not a folder")
    raw, tok, train = pipeline()
    events = []
    ids = {s.name: s.step_id for s in _run([tok], str(here), subscribers=[events.append]).steps}
    warned = [e.text for e in events if isinstance(e, LogLine) and e.level == "warning"]
    assert sorted(w.split(":")[0] for w in warned if "lineage markers" in w) == sorted(ids.values())
    view, store = counted(str(here))
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"]]
    assert down.cost["reads"] == 1 + 2 + 2  # the (absent) index, each status and record


def test_the_markers_and_the_edges_index_walk_an_early_cutoff_alike(tmp_path, monkeypatch, capsys):
    """A real run, then one whose steps are cut off (executor/engine/run/cutoff.py commits aliases):
    the walk from the markers alone names what the edges index names, and reads nothing."""
    from executor.cli import run
    from tests.cutoff.chain_experiment import chain

    (tmp_path / "sidefx").mkdir()
    monkeypatch.setenv("CUT_SIDEFX", str(tmp_path / "sidefx"))
    prefix = tmp_path / "prefix"
    for version in ("1", "2"):
        assert run(chain(write_version=version), "cut", argv=["--prefix", str(prefix), "--runner", "inline"],
                   environ={}) == 0
    capsys.readouterr()
    first_write = min(prefix.glob("cut/write-*/.executor/status.json"), key=lambda p: p.stat().st_mtime)
    start = str(first_write.parent.parent.relative_to(prefix))
    view, store = counted(str(prefix))
    marked = lineage_down(view, start)
    assert store.reads == [] and len(marked.nodes) == 5  # write, upper and frame, and the two aliases
    _forget_markers(str(prefix))
    indexed = lineage_down(PrefixView.open(str(prefix)), start)
    walk = sorted((n.rel, n.via, n.depth, n.state) for n in marked.nodes)
    assert walk == sorted((n.rel, n.via, n.depth, n.state) for n in indexed.nodes)
    assert sorted(n.via or "" for n in marked.nodes) == ["", "adopted as", "adopted as", "consumed by", "consumed by"]
