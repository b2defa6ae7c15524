"""What the live view's rows show (issue 47): every step of a run's plan, started or not; the
state after a run on the first load after it; where a copied step came from, under its own label."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import quote

from tests.serve import server

ROW = re.compile(r'<tr class="step[^"]*" id="step-([^"]+)" data-id="[^"]+" data-state="([^"]+)"')


def hello(prefix: Path, *flags: str) -> None:
    done = server.run_experiment(server.EXPERIMENTS / "hello.py", str(prefix), "--runner", "inline", *flags)
    assert done.returncode in (0, 1), done.stdout + done.stderr


def rows(served: server.Served) -> dict[str, str]:
    """Step name -> state, as the overview shows each row."""
    status, _, page = served.get("/")
    assert status == 200
    return {step_id.rsplit("-", 1)[0]: state for step_id, state in ROW.findall(page.decode())}


def test_steps_of_a_run_that_never_started_are_rows_with_their_runs_outcome(tmp_path):
    hello(tmp_path, "--fail-shout")  # shout fails: summary is blocked and never starts (no status)
    assert not list(tmp_path.glob("hello/summary-*"))
    served = server.start(str(tmp_path))
    try:
        shown = rows(served)
        assert shown["hello/shout"] == "FAILED" and shown["hello/summary"] == "NO STATUS", shown
        page = served.get("/")[2].decode()
        assert "never started: blocked in its run" in page
        assert served.get("/?state=NO+STATUS")[2].decode().count('class="step planned"') == 1
    finally:
        served.stop()


def test_the_first_load_after_a_run_shows_how_that_run_ended(tmp_path):
    """The server's picture is older than its interval when the run ends (nobody was watching):
    the first page after it must show the run's end, not the picture from before it."""
    hello(tmp_path, "--fail-shout")
    served = server.start(str(tmp_path), "--interval", "1")
    try:
        assert rows(served)["hello/shout"] == "FAILED"
        time.sleep(1.5)  # the picture is now older than the interval
        hello(tmp_path)  # the failed step is retried and its dependents run
        shown = rows(served)  # at once: the first load after the run
        assert shown["hello/shout"] == "SUCCESS" and shown["hello/summary"] == "SUCCESS", shown
    finally:
        served.stop()


def test_where_a_step_was_copied_from_has_its_own_label(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    hello(a)
    hello(b, "--cache-from", str(a))
    [summary] = [p.name for p in (b / "hello").glob("summary-*")]
    served = server.start(str(b))
    try:
        page = served.get(f"/step/{quote('hello/' + summary)}")[2].decode()
        assert f'<th>copied from</th><td id="copied-from"><code>{a}</code>' in page, page
        error = re.search(r'<td class="error-text">(.*?)</td>', served.get("/")[2].decode(), re.S)
        assert error is not None and str(a) not in error.group(1), "shown as the step's error"
        assert f'copied from <code>{a}</code>' in served.get("/")[2].decode()
    finally:
        served.stop()
