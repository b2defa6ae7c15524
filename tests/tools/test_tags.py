"""Tags: created by compare-and-swap, moved only with force and a reason (history kept), and read by
experiments through output_of_tag(...) whose digest is part of the reader's id."""

from __future__ import annotations

import concurrent.futures
import json
import threading
from pathlib import Path

import pytest

from executor import api
from executor.core.errors import ConfigEncodingError, ExecutorError
from executor.core.graph import build_graph
from executor.engine.store import open_store
from executor.engine.events import Events, StepExplained
from executor.engine.prefix.prefixes import open_prefix
from executor.tools.explain import run_explain
from executor.tools.tags import TagTaken, list_tags, read_tag, tag, tag_history

from .names_steps import pipeline, reader_of

WHO = {"user": "ada", "host": "lab"}


def _run(steps, prefix, **kw):
    result = api.run(steps, prefix=prefix, runner="inline", **kw)
    assert result.ok, result.failed
    return result


@pytest.fixture
def two_outputs(tmp_path):
    """Two completed raw outputs under one prefix: (prefix, store, step id of 'a', of 'b')."""
    prefix = str(tmp_path / "prefix")
    a, b = pipeline("alpha")[0], pipeline("beta")[0]
    ids = [_run([s], prefix).step(s).step_id for s in (a, b)]
    return prefix, open_store(prefix), ids[0], ids[1]


def test_two_taggers_racing_make_one_tag(two_outputs):
    prefix, store, a, b = two_outputs
    start = threading.Barrier(8)

    def tagger(i: int):
        start.wait()
        try:
            return tag(store, a if i % 2 else b, "corpus/raw@v1", by={"user": f"u{i}"})
        except TagTaken as e:
            return e

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(tagger, range(8)))
    won = [o for o in outcomes if not isinstance(o, TagTaken)]
    history = tag_history(store, "corpus/raw@v1")
    assert len(history) == 1  # one entry: nobody overwrote anybody
    winner = history[0]
    # the winner and every tagger of the same output get the entry; the others are told who has it
    assert all(o.digest == winner.digest for o in won)
    lost = [o for o in outcomes if isinstance(o, TagTaken)]
    assert lost and all(winner.step_id in str(e) and "--force" in str(e) for e in lost)


def test_a_taken_version_moves_only_with_force_and_a_reason_and_keeps_its_history(two_outputs):
    prefix, store, a, b = two_outputs
    first = tag(store, a, "corpus/raw@v1", by=WHO, at=1.0)
    with pytest.raises(TagTaken, match="already points at " + a):
        tag(store, b, "corpus/raw@v1", by=WHO)
    with pytest.raises(ExecutorError, match="needs a reason"):
        tag(store, b, "corpus/raw@v1", by=WHO, force=True)
    moved = tag(store, b, "corpus/raw@v1", by=WHO, at=2.0, force=True, reason="beta is the fixed corpus")
    assert moved.moved_from == first.digest and moved.step_id == b
    assert [e.step_id for e in tag_history(store, "corpus/raw@v1")] == [a, b]
    assert read_tag(store, "corpus/raw@v1").step_id == b
    assert [t.tag for t in list_tags(store)] == ["corpus/raw@v1"]
    stored = json.loads(Path(prefix, "tags/corpus/raw/v1.json").read_text())
    assert stored["schema"] == 1 and stored["entries"][1]["reason"] == "beta is the fixed corpus"


def test_a_tag_names_a_completed_output_only(tmp_path):
    prefix = str(tmp_path / "p")
    with pytest.raises(ExecutorError, match="no output at"):
        tag(open_store(prefix), "names/raw-000000000000", "x@1")
    with pytest.raises(ValueError, match="NAME@VERSION"):
        tag(open_store(prefix), "names/raw-000000000000", "no-version")


def test_a_tagged_dependency_id_moves_only_when_the_tag_moves(two_outputs):
    prefix, store, a, b = two_outputs
    tag(store, a, "corpus/raw@v1", by=WHO)
    reader = reader_of("corpus/raw@v1")
    first = _run([reader], prefix)
    report = first.step(reader)
    assert Path(report.output_path, "data.txt").read_text() == "ALPHA?"  # read the tagged output's files
    again = api.plan([reader], prefix=prefix)
    assert again.step(reader).step_id == report.step_id and again.step(reader).decision == "skip"

    tag(store, b, "corpus/raw@v1", by=WHO, force=True, reason="beta")
    graph = api.graph_of([reader], api.Options(prefix=prefix), {})
    identity = graph.nodes[graph.digest_of(reader)].identity
    assert identity["config"]["fields"]["input_path"] == {
        "tag": "corpus/raw@v1", "digest": read_tag(store, "corpus/raw@v1").digest, "sub": "data.txt"}
    # explain names the move (the earlier version is found on storage)
    said: list = []
    assert run_explain(graph, "names/reader", open_prefix(prefix), None, events=Events([said.append])) == 0
    first_digest, moved_digest = (e.digest[:12] for e in tag_history(store, "corpus/raw@v1"))
    assert [type(e) for e in said] == [StepExplained] and said[0].step == "names/reader"
    text = "\n".join(said[0].lines)
    assert f"tag corpus/raw@v1 moved from {first_digest}… to {moved_digest}… (config.input_path)" in text, text

    moved = _run([reader], prefix).step(reader)
    assert moved.step_id != report.step_id  # a deliberate change: the tag's digest is in the id
    assert Path(moved.output_path, "data.txt").read_text() == "BETA?"


def test_a_missing_tag_names_the_step_the_field_and_how_to_create_it(tmp_path):
    reader = reader_of("corpus/raw@v9")
    with pytest.raises(ConfigEncodingError) as e:
        api.plan([reader], prefix=str(tmp_path / "p"))
    message = str(e.value)
    assert "'names/reader'" in message and "input_path" in message and "stepgraph tag STEP corpus/raw@v9" in message
    with pytest.raises(ConfigEncodingError, match="resolved from the prefix's tags"):
        build_graph([reader])  # no prefix to read tags from (ids, check)
