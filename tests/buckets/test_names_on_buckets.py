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
from tests.tools.test_lineage import counted


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
    counting_view, counting = counted(bucket.prefix, bucket.options)
    down = lineage_down(counting_view, ids["names/raw"])  # the first walk: the commits' markers alone
    assert [n.rel for n in down.nodes][:2] == [ids["names/raw"], ids["names/tok"]]
    assert counting.reads == [] and down.cost == {"listings": 2, "reads": 0}
    assert counting.listings == ["", "lineage/"]
    for key in store.list_generations("lineage/", ""):  # as an executor of before markers left it
        store.delete(key)
    before = lineage_down(view, ids["names/raw"])  # the edges index: a read per status and record
    assert [n.rel for n in before.nodes] == [n.rel for n in down.nodes] and before.cost["reads"] > len(down.nodes)
    again = lineage_down(view, ids["names/raw"])  # then one read of the index it wrote
    assert [n.rel for n in again.nodes] == [n.rel for n in down.nodes]
    assert again.cost == {"listings": 2, "reads": 1}

    taint_output(store, ids["names/tok"], "taint", "bad <shard>", by={"user": "t"})
    planned = {s.name: (str(s.decision), s.reason)
               for s in api.plan([train], prefix=bucket.prefix, storage_options=bucket.options).steps}
    assert planned["names/raw"][0] == "skip"
    assert planned["names/tok"] == ("run", "tainted: bad <shard> (by t)")
    assert planned["names/train"][0] == "run"
