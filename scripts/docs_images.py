"""The docs' pictures of the plan, drawn from the code so they cannot drift.

    uv run python scripts/docs_images.py           # redraw docs/img/plan.png (needs chromium)
    uv run python scripts/docs_images.py --check   # is it stale? (no browser; exit 1 if so)

docs/img/plan.png is hello.py's plan after a failed run: experiments/hello.py runs once with
--fail-shout (inline, in a temporary prefix), then `stepgraph graph experiments/hello.py plan.html`
draws the plan a re-run would make, and Debian's chromium (through Playwright, as tests/browser.py
drives it) screenshots the page. The page's SHA-256 is kept beside the picture
(docs/img/plan.png.source-sha256): tests/docs/test_images.py redraws the page, without a browser,
and fails when the drawing, hello.py or its ids changed since the picture was taken.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PICTURE = REPO / "docs" / "img" / "plan.png"
SOURCE_HASH = PICTURE.with_name(PICTURE.name + ".source-sha256")
VIEWPORT = {"width": 900, "height": 600}


def plan_page(workdir: Path) -> str:
    """The HTML page the picture shows, drawn in `workdir` (its prefix path made neutral)."""
    prefix, page = workdir / "prefix", workdir / "plan.html"
    hello = ["experiments/hello.py", "--prefix", str(prefix), "--runner", "inline"]
    failed = subprocess.run([sys.executable, *hello, "--fail-shout"], cwd=REPO, capture_output=True, text=True)
    if failed.returncode != 1:
        raise SystemExit(f"hello.py --fail-shout should fail one step (exit 1), got {failed.returncode}:\n"
                         f"{failed.stdout[-2000:]}{failed.stderr[-2000:]}")
    subprocess.run([sys.executable, "-m", "executor", "graph", "experiments/hello.py", str(page), "--prefix",
                    str(prefix)], cwd=REPO, check=True, capture_output=True)
    return re.sub(re.escape(str(prefix)), "PREFIX", page.read_text())


def source_hash(page: str) -> str:
    return hashlib.sha256(page.encode()).hexdigest()


def screenshot(page: Path, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH: apt-get install -y chromium (see ENVIRONMENT.md)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport=VIEWPORT)
            tab.goto(page.as_uri())
            tab.wait_for_selector("g.node")
            tab.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether docs/img/plan.png is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docs-images-") as tmp:
        page = plan_page(Path(tmp))
        digest = source_hash(page)
        if args.check:
            stale = not SOURCE_HASH.exists() or SOURCE_HASH.read_text().strip() != digest
            print(f"{PICTURE.relative_to(REPO)}: {'stale: run scripts/docs_images.py' if stale else 'up to date'}")
            return 1 if stale else 0
        html = Path(tmp) / "shown.html"
        html.write_text(page)
        screenshot(html, PICTURE)
    SOURCE_HASH.write_text(digest + "\n")
    print(f"wrote {PICTURE.relative_to(REPO)} and {SOURCE_HASH.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
