"""Tags, lineage and taint on emulated buckets (fake GCS, moto S3): racing taggers through the
object store's conditional writes, a tagged reader, a taint that stops reuse, lineage's cost."""

from __future__ import annotations

import concurrent.futures
import threading

from executor import api
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.store import open_store
from executor.tools.lineage import lineage_down, lineage_up
from executor.tools.tags import TagTaken, tag, tag_history
from executor.tools.taint import taint_output
from tests.tools.names_steps import pipeline, reader_of


def test_tags_taint_and_lineage_on_a_bucket(bucket):
    run = dict(prefix=bucket.prefix, storage_options=bucket.options, runner="inline")
    raw, tok, train = pipeline("on a bucket")
    other = pipeline("another")[0]
    made = api.run([train, other], **run)
    assert made.ok, made.failed
    ids = {s.name: s.step_id for s in made.steps if s.name != "names/raw" or s.digest == made.step(raw).digest}
    other_id = made.step(other).step_id
    store = open_store(bucket.prefix, bucket.options)

    start = threading.Barrier(4)

    def tagger(i: int):
        start.wait()
        try:
            return tag(store, ids["names/tok"] if i % 2 else other_id, "b/tok@1", by={"user": f"u{i}"})
        except TagTaken as e:
            return e

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(tagger, range(4)))
    assert len(tag_history(store, "b/tok@1")) == 1
    assert any(isinstance(o, TagTaken) for o in outcomes)

    reader = reader_of("b/tok@1")
    read = api.run([reader], **run)
    assert read.ok, read.failed
    assert api.plan([reader], **{k: v for k, v in run.items() if k != "runner"}).step(reader).decision == "skip"

    view = PrefixView.open(bucket.prefix, bucket.options)
    up = lineage_up(view, ids["names/train"], bucket.options)
    assert [n.rel for n in up.nodes] == [ids["names/train"], ids["names/tok"], ids["names/raw"]]
    down = lineage_down(view, ids["names/raw"])
    assert [n.rel for n in down.nodes][:2] == [ids["names/raw"], ids["names/tok"]]
    assert down.cost["listings"] == 1
    again = lineage_down(view, ids["names/raw"])  # the edges index was written by the first walk
    assert [n.rel for n in again.nodes] == [n.rel for n in down.nodes] and again.cost == {"listings": 1, "reads": 1}

    taint_output(store, ids["names/tok"], "taint", "bad <shard>", by={"user": "t"})
    planned = {s.name: (str(s.decision), s.reason)
               for s in api.plan([train], prefix=bucket.prefix, storage_options=bucket.options).steps}
    assert planned["names/raw"][0] == "skip"
    assert planned["names/tok"] == ("run", "tainted: bad <shard> (by t)")
    assert planned["names/train"][0] == "run"
