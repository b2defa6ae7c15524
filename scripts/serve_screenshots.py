"""The README's pictures of `stepgraph serve`, taken by the browser tests' recipe.

    uv run python scripts/serve_screenshots.py [--out docs/img]

The prefix the tests serve (tests/serve/conftest.py: experiments/hello.py ran, a step failed with
markup in its error, hello/summary has an attempt log), plus a lease another runner holds with a
growing log; the server started as tests/serve/server.py starts it; Debian's chromium through
Playwright, full-page screenshots of the overview, a step and a run's DAG.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from executor.core.record import Owner, State, Status  # noqa: E402
from executor.engine.store import open_store  # noqa: E402
from tests.serve import server  # noqa: E402
from tests.serve.conftest import make_prefix  # noqa: E402


def hold_a_lease(prefix: Path) -> str:
    step_id = "train/tiny_moe-5f0c2a9e7b1d"
    status = Status(State.RUNNING, "5f0c2a9e7b1d" + "0" * 52, step_id, seq=3, attempt=1,
                    owner=Owner("20261205T061500Z-a1b2c3", "gpu-7", 4242, "ana"), written_at=time.time() - 4,
                    started_at=time.time() - 95)
    open_store(str(prefix)).create_if_absent(f"{step_id}/.executor/status.json", status.to_bytes())
    log = prefix / step_id / ".executor" / "logs" / "attempt-1.log"
    log.parent.mkdir(parents=True)
    log.write_text("=== 2026-12-05T06:15:00Z train/tiny_moe-5f0c2a9e7b1d attempt 1 try 1 ===\n" +
                   "".join(f"step {s:4d}  loss {4.2 - s / 400:.3f}  tokens/s 51234\n" for s in range(0, 400, 50)))
    return step_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "img"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="serve-shots-") as tmp:
        prefix = make_prefix(Path(tmp))
        running = hold_a_lease(prefix)
        served = server.start(str(prefix))
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1400, "height": 800})
                page.goto(served.url)
                page.wait_for_selector("#live.on")
                page.screenshot(path=str(out / "live-view-overview.png"), full_page=True)
                page.goto(f"{served.base}/step/{running}")
                page.screenshot(path=str(out / "live-view-step.png"), full_page=True)
                page.goto(f"{served.base}/runs")
                page.locator("#runs tr.run", has_text="hello").locator("a.run-link").click()
                page.wait_for_selector("#dag g.node")
                page.screenshot(path=str(out / "live-view-run.png"), full_page=True)
                browser.close()
        finally:
            served.stop()
    for name in ("overview", "step", "run"):
        print(out / f"live-view-{name}.png")


if __name__ == "__main__":
    main()
