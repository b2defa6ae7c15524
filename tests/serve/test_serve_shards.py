"""The live view shows how many shards an incremental data step processed and reused
(shards_processed / shards_reused from its result), in a real browser: the step page of a grown
corpus's tokenize step says "2 processed, 14 reused", its first run's "16 processed, 0 reused"."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.api import run
from tests.serve import server
from tests.steps.test_incremental_shards import SHARDS, corpora, tokenize_step  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def grown_prefix(tmp_path_factory, corpora):  # noqa: F811
    prefix = str(tmp_path_factory.mktemp("shards") / "prefix")
    steps = {}
    for name in ("first", "grown"):
        steps[name] = tokenize_step(corpora[name], corpora["tokenizer"])
        made = run([steps[name]], prefix=prefix, runner="inline")
        assert made.ok
        steps[name] = made.step(steps[name]).step_id
    running = server.start(prefix)
    yield running, steps
    running.stop()


def test_a_step_page_shows_the_shards_processed_and_reused(browser, grown_prefix):
    served, ids = grown_prefix
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(served.url)  # the token sets the cookie
        page.goto(f"{served.base}/step/{ids['grown']}")
        assert page.locator("#shards").inner_text() == f"2 processed, {SHARDS - 2} reused"
        page.goto(f"{served.base}/step/{ids['first']}")
        assert page.locator("#shards").inner_text() == f"{SHARDS} processed, 0 reused"
    finally:
        context.close()
