"""Tags in the live view (issue 49): a tag made while the steps page is open appears on its step's row
without a reload; the tags page lists each tag and the step it points at; a moved tag's reason and a
tagger's name with markup in them are text in a real browser; a step's page names its tags."""

from __future__ import annotations

import time
from urllib.parse import quote

from executor import api
from executor.engine.store import open_store
from executor.tools.tags import tag
from tests.serve import server
from tests.serve.test_serve_browser import LIVE_LIMIT_S
from tests.tools.names_steps import pipeline

MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def test_tags_in_the_live_view(browser, tmp_path):
    prefix = str(tmp_path / "prefix")
    raw, tok, train = pipeline("served tags")
    made = api.run([train], prefix=prefix, runner="inline")
    assert made.ok
    ids = {s.name: s.step_id for s in made.steps}
    served = server.start(prefix)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(served.url)  # the token sets the cookie
        page.evaluate("window.__same_page = 'yes'")
        page.wait_for_selector("#live.on")
        tag(open_store(prefix), ids["names/tok"], "tok/served@1", by={"user": MARKUP, "host": "h"}, at=time.time())
        tagged = time.monotonic()
        row = f'tr.step[data-id="{ids["names/tok"]}"] .tag'
        page.wait_for_selector(row, timeout=LIVE_LIMIT_S * 1000)
        assert time.monotonic() - tagged <= LIVE_LIMIT_S
        assert page.locator(row).inner_text() == "tok/served@1"
        assert page.locator(f'tr.step[data-id="{ids["names/raw"]}"] .tag').count() == 0
        assert page.evaluate("window.__same_page") == "yes"  # updated in place, not reloaded

        tag(open_store(prefix), ids["names/train"], "tok/served@1", by={"user": "ada", "host": "h"},
            at=time.time(), force=True, reason=f"wrong one {MARKUP}")
        page.wait_for_selector(f'tr.step[data-id="{ids["names/train"]}"] .tag', timeout=LIVE_LIMIT_S * 1000)
        page.wait_for_selector(row, state="detached", timeout=LIVE_LIMIT_S * 1000)  # moved off tok's row

        page.goto(f"{served.base}/tags")
        listed = page.locator("tr.tag-row")
        assert listed.count() == 1
        text = listed.first.inner_text()
        assert "tok/served@1" in text and ids["names/train"] in text and f"wrong one {MARKUP}" in text, text
        assert listed.first.locator(f'a[href="/step/{quote(ids["names/train"])}"]').count() == 1

        tag(open_store(prefix), ids["names/raw"], "raw/served@1", by={"user": MARKUP, "host": "h"}, at=time.time())
        deadline = time.monotonic() + LIVE_LIMIT_S  # the tags page is not live: a load may show a picture
        # up to --interval old
        while page.goto(f"{served.base}/tags") and page.locator("tr.tag-row").count() < 2:
            assert time.monotonic() < deadline, page.content()
            time.sleep(0.5)
        assert MARKUP in page.locator('tr.tag-row[data-tag="raw/served@1"]').inner_text()

        page.goto(f"{served.base}/step/{quote(ids['names/train'])}")
        assert page.locator("#tags").inner_text().strip() == "tok/served@1"
        assert page.evaluate("() => window.__pwned === undefined")  # nothing of the markup ran
    finally:
        context.close()
        served.stop()


def test_the_tags_page_of_a_prefix_without_tags(tmp_path):
    prefix = str(tmp_path / "prefix")
    raw, _, _ = pipeline("no tags")
    assert api.run([raw], prefix=prefix, runner="inline").ok
    served = server.start(prefix)
    try:
        code, _, body = served.get("/tags")
    finally:
        served.stop()
    assert code == 200 and 'id="empty">no tags under this prefix' in body.decode()
