"""Taint: a tainted output and everything derived from it stop being reused, here and in a prefix that
reads this one with --cache-from; untaint restores reuse; both events are kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor import api
from executor.core.errors import ExecutorError
from executor.engine.store import open_store
from executor.tools.taint import read_taints, taint_output

from .names_steps import pipeline, reader_of

WHO = {"user": "grace", "host": "lab"}


def _run(steps, prefix, **kw):
    result = api.run(steps, prefix=prefix, runner="inline", **kw)
    assert result.ok, result.failed
    return result


def _plan(steps, prefix, **kw) -> dict[str, tuple[str, str]]:
    return {s.name: (str(s.decision), s.reason) for s in api.plan(steps, prefix=prefix, **kw).steps}


def _calls(tmp_path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text().split() if path.exists() else []


def test_a_taint_stops_reuse_downstream_and_untaint_restores_it(tmp_path):
    prefix = str(tmp_path / "prefix")
    raw, tok, train = pipeline("made from a leaked benchmark")
    ran = _run([train], prefix)
    store = open_store(prefix)
    assert _plan([train], prefix) == {n: ("skip", "succeeded") for n in ("names/raw", "names/tok", "names/train")}

    taint_output(store, ran.step(tok).step_id, "taint", "leaked <b>benchmark</b>", by=WHO, at=1.0)
    planned = _plan([train], prefix)
    assert planned["names/raw"] == ("skip", "succeeded")  # upstream of the taint: still reused
    assert planned["names/tok"] == ("run", "tainted: leaked <b>benchmark</b> (by grace)")
    assert planned["names/train"] == ("run", "derived from tainted names/tok: leaked <b>benchmark</b> (by grace)")

    before = len(_calls(tmp_path))
    _run([train], prefix)
    assert _calls(tmp_path)[before:] == ["upper", "upper"]  # tok and train ran again, raw did not
    # the same bytes again (a deterministic step): still the tainted output, so still not reused
    assert _plan([train], prefix)["names/tok"][0] == "run"

    taint_output(store, ran.step(tok).step_id, "untaint", "false alarm", by=WHO, at=2.0)
    assert {a for a, _ in _plan([train], prefix).values()} == {"skip"}
    events = json.loads(Path(prefix, "taints", ran.step(tok).digest + ".json").read_text())["events"]
    assert [(e["action"], e["reason"]) for e in events] == [("taint", "leaked <b>benchmark</b>"),
                                                            ("untaint", "false alarm")]
    assert not read_taints(store)[ran.step(tok).digest].tainted


def test_a_taint_needs_a_reason_and_untaint_needs_a_taint(tmp_path):
    prefix = str(tmp_path / "prefix")
    raw = pipeline()[0]
    rel = _run([raw], prefix).step(raw).step_id
    with pytest.raises(ExecutorError, match="needs a reason"):
        taint_output(open_store(prefix), rel, "taint", " ")
    with pytest.raises(ExecutorError, match="is not tainted"):
        taint_output(open_store(prefix), rel, "untaint", "why not")


def test_a_taint_in_a_cache_from_source_stops_copies_and_reuse_downstream(tmp_path):
    source, here = str(tmp_path / "source"), str(tmp_path / "here")
    raw, tok, train = pipeline("corrupt shard")
    made = _run([train], source)
    assert {a for a, _ in _plan([train], here, cache_from=(source,)).values()} <= {"copy"}
    taint_output(open_store(source), made.step(raw).step_id, "taint", "corrupt shard 7", by=WHO)
    planned = _plan([train], here, cache_from=(source,))
    assert planned["names/raw"] == ("run", "new: no previous attempt; not copied: tainted: corrupt shard 7 (by grace)")
    assert planned["names/tok"][0] == "run" and "derived from tainted names/raw" in planned["names/tok"][1]
    assert planned["names/train"][0] == "run"

    # an output copied here before the taint is not reused either
    other = str(tmp_path / "other")
    clean_source = str(tmp_path / "clean")
    raw2, tok2, train2 = pipeline("another corpus")
    made2 = _run([train2], clean_source)
    _run([train2], other, cache_from=(clean_source,))
    assert {a for a, _ in _plan([train2], other, cache_from=(clean_source,)).values()} == {"skip"}
    taint_output(open_store(clean_source), made2.step(tok2).step_id, "taint", "leak", by=WHO)
    planned = _plan([train2], other, cache_from=(clean_source,))
    assert planned["names/raw"][0] == "copy"  # clean, and now needed: tok is made here again
    assert planned["names/tok"] == ("run", "new: no previous attempt; not copied: tainted: leak (by grace)")
    assert planned["names/train"] == ("run", "derived from tainted names/tok: leak (by grace)")  # copied before


def test_a_taint_reason_with_markup_is_text_in_the_run_report_in_a_real_browser(tmp_path):
    from tests.browser import chromium_browser

    from .toy import run_main

    prefix = str(tmp_path / "prefix")
    raw, tok, train = pipeline("x")
    made = _run([train], prefix)
    reason = "leak <script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">"
    taint_output(open_store(prefix), made.step(tok).step_id, "taint", reason, by=WHO)
    rerun = _run([train], prefix)
    assert rerun.step(tok).reason.startswith("tainted: leak <script>") and rerun.run_file
    code, out = run_main("report", "--prefix", prefix)
    assert code == 0, out
    page_path = Path(rerun.run_file).with_suffix(".html")
    assert "<script>window.pwned" not in page_path.read_text()  # escaped in the file
    with chromium_browser() as browser:
        page = browser.new_page()
        page.goto(page_path.as_uri())
        assert page.evaluate("() => window.pwned === undefined")  # nothing of the reason ran
        row = page.locator("td", has_text="tainted: leak")
        assert row.count() >= 1 and reason in row.first.inner_text()  # shown as the text it is


def test_a_reader_of_a_tag_is_recalled_when_the_tagged_output_was_made_from_a_tainted_one(tmp_path):
    from executor.tools.tags import tag

    prefix = str(tmp_path / "prefix")
    raw, tok, train = pipeline("tagged")
    made = _run([tok], prefix)
    tag(open_store(prefix), made.step(tok).step_id, "tok@1", by=WHO)
    reader = reader_of("tok@1")
    _run([reader], prefix)
    assert _plan([reader], prefix) == {"names/reader": ("skip", "succeeded")}
    taint_output(open_store(prefix), made.step(raw).step_id, "taint", "bad raw", by=WHO)
    # the plan holds the reader alone: the tagged output's records say it was made from raw
    assert _plan([reader], prefix) == {"names/reader": (
        "run", f"reads tag tok@1, which is tainted: made from tainted {made.step(raw).step_id}: bad raw (by grace)")}
