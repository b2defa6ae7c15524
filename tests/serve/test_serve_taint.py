"""The live view of a run that re-ran tainted steps: each one's reason (the taint's, markup in it)
is shown as text on the run's page in a real browser; nothing of it runs. (The stored run report:
tests/tools/test_taint.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from executor import api
from executor.engine.store import open_store
from executor.tools.taint import taint_output
from tests.serve import server
from tests.tools.names_steps import pipeline

REASON = 'leak <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="module")
def tainted_run(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("taint") / "prefix")
    raw, tok, train = pipeline("served")
    made = api.run([train], prefix=prefix, runner="inline")
    assert made.ok
    taint_output(open_store(prefix), made.step(tok).step_id, "taint", REASON, by={"user": "ada"})
    rerun = api.run([train], prefix=prefix, runner="inline")
    assert rerun.ok and rerun.run_file
    running = server.start(prefix)
    yield running, Path(rerun.run_file).stem
    running.stop()


def test_a_taint_reason_with_markup_is_text_in_the_live_view(browser, tainted_run):
    served, run_name = tainted_run
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(served.url)  # the token sets the cookie
        page.goto(f"{served.base}/run/{run_name}")
        row = page.locator("tr", has_text="tainted: leak")
        assert row.count() == 1 and REASON in row.first.inner_text()
        derived = page.locator("tr", has_text="derived from tainted names/tok")
        assert derived.count() == 1 and REASON in derived.first.inner_text()
        assert page.evaluate("() => window.__pwned === undefined")  # nothing of the reason ran
    finally:
        context.close()
