"""Lineage from records alone: up to the raw inputs (through an adoption, a --cache-from copy and a
tag), down to everything that consumed an output (adopted ids included), with its cost counted."""

from __future__ import annotations

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
    # the first walk reads every status and every record but the alias's (and finds no index)
    assert down.cost == {"listings": 1, "reads": 1 + 5 + 4}
    again = lineage_down(PrefixView.open(here), ids["names/raw"])
    assert [(n.rel, n.via, n.depth) for n in again.nodes] == walked
    assert again.cost == {"listings": 1, "reads": 1}  # the edges index: one listing, one read


def test_lineage_down_reads_again_only_what_changed_since_its_index_and_is_never_behind(tmp_path):
    """The index (executor/tools/lineage_index.py) holds each output's status generation: a new
    consumer, a re-written status and a status deleted since are seen at once, each read once."""
    here = str(tmp_path / "here")
    raw, tok, train = pipeline()
    ids = {s.name: s.step_id for s in _run([tok], here).steps}
    view = PrefixView.open(here)
    assert [n.rel for n in lineage_down(view, ids["names/raw"]).nodes] == [ids["names/raw"], ids["names/tok"]]

    ids.update({s.name: s.step_id for s in _run([train], here).steps})  # a new consumer since the index
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes] == [ids["names/raw"], ids["names/tok"], ids["names/train"]]
    assert down.cost == {"listings": 1, "reads": 1 + 2}  # the index, then train's status and record

    from pathlib import Path
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
