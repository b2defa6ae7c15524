"""A real browser for the tests of pages we ship or serve: Debian's chromium through Playwright
(Playwright's own browsers come from a download site these machines cannot reach)."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from typing import Iterator

import pytest


@contextmanager
def chromium_browser() -> Iterator:
    """A launched chromium (Playwright's Browser), closed on exit; the test is skipped where the
    machine has none (.ci/run installs it)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()
