"""The live view in a real browser (issue 47): a step a run planned but never started (blocked)
appears as a row, with its run's outcome, while the page is open, without a reload."""

from __future__ import annotations

import time

from tests.serve import server
from tests.serve.test_serve_browser import LIVE_LIMIT_S
from tests.serve.test_serve_rows import hello


def test_a_blocked_step_of_a_run_appears_live_as_a_never_started_row(browser, tmp_path):
    hello(tmp_path)
    served = server.start(str(tmp_path))
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(served.url)
        page.evaluate("window.__same_page = 'yes'")
        page.wait_for_selector("#live.on")
        hello(tmp_path, "--greeting", "Yo", "--fail-shout")  # a new shout fails: its summary never starts
        ended = time.monotonic()
        row = page.wait_for_selector('tr.step.planned[data-state="NO STATUS"]', timeout=LIVE_LIMIT_S * 1000)
        assert time.monotonic() - ended <= LIVE_LIMIT_S
        assert row.get_attribute("data-id").startswith("hello/summary-")
        assert "never started: blocked in its run" in row.inner_text()
        assert page.evaluate("window.__same_page") == "yes"
        assert page.locator('#counts .count[data-state="NO STATUS"] .n').inner_text() == "1"
    finally:
        context.close()
        served.stop()
