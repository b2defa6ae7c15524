"""The docs' picture of a plan is not older than the drawing it shows (issue 47: docs/img/plan.png
showed ids and a legend the code no longer drew). scripts/docs_images.py takes the picture and keeps
the SHA-256 of the page it photographed beside it; this test redraws that page (hello.py run with
--fail-shout, then `stepgraph graph`; no browser) and compares."""

from __future__ import annotations

import importlib.util

from tests.docs.markdown import REPO


def _script():
    spec = importlib.util.spec_from_file_location("docs_images", REPO / "scripts" / "docs_images.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plan_picture_shows_what_the_code_draws_today(tmp_path):
    images = _script()
    page = images.plan_page(tmp_path)
    assert 'data-action="run"' in page and "hello/summary" in page  # the drawing the picture shows
    assert images.PICTURE.is_file()
    kept = images.SOURCE_HASH.read_text().strip() if images.SOURCE_HASH.exists() else "(none)"
    assert kept == images.source_hash(page), (
        f"{images.PICTURE.relative_to(REPO)} is older than the drawing it shows (the plan page changed: "
        f"draw.py, hello.py or its ids): run `uv run python scripts/docs_images.py` and commit the picture")


def test_the_docs_show_the_picture_the_script_takes():
    concepts = (REPO / "docs" / "concepts.md").read_text()
    assert "(img/plan.png)" in concepts
