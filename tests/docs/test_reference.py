"""The reference pages hold what the code has: every exit code, every environment variable a user
can set, the wording of the drift warning, and the site builds with no broken link."""

from __future__ import annotations

import re
import subprocess
import sys

from executor.core.exit_codes import MEANINGS, ExitCode
from tests.docs.markdown import REPO

CLI = REPO / "docs" / "cli.md"
# Variables the product reads or sets that are not for users, and why.
INTERNAL_VARIABLES = {
    "STEPGRAPH_COORDINATOR_ADDRESS": "set by the executor for the processes of a multi-host step",
    "STEPGRAPH_NUM_PROCESSES": "set by the executor for the processes of a multi-host step",
    "STEPGRAPH_PROCESS_ID": "set by the executor for the processes of a multi-host step",
}


def test_every_exit_code_is_in_the_reference_table():
    table = CLI.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ExitCode:
        row = next((line for line in table.splitlines() if line.startswith(f"| {int(code)} |")), None)
        assert row, f"exit code {int(code)} ({MEANINGS[code]}) is missing from docs/cli.md's table"


def _variables_in_code() -> set[str]:
    found: set[str] = set()
    for path in [*REPO.joinpath("executor").rglob("*.py"), *REPO.joinpath("steps").rglob("*.py")]:
        found |= set(re.findall(r"[\"']((?:EXECUTOR|STEPGRAPH)_[A-Z0-9_]+)[\"']", path.read_text()))
    return found


def test_every_environment_variable_the_code_reads_is_documented():
    variables = _variables_in_code()
    assert {"EXECUTOR_PREFIX", "EXECUTOR_STORAGE_OPTIONS", "EXECUTOR_STILL_RUNNING_EVERY_S"} <= variables
    table = CLI.read_text().split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    missing = sorted(v for v in variables - INTERNAL_VARIABLES.keys() if f"`{v}`" not in table)
    assert not missing, f"environment variables read by the code but not in docs/cli.md: {missing}"


def test_the_drift_warning_is_quoted_as_it_is_printed():
    from executor.tools.drift import Drift

    drift = Drift(name="hello/count", step_id="hello/count-96d5fcec79dc", function="experiments.hello:count_words",
                  current_sha256="0" * 64, recorded_sha256="1" * 64, recorded_function=None,
                  recorded_commit=None, recorded_dirty=None)
    fixed = drift.message().split("now). ", 1)[1]  # the advice, after the varying hashes
    page = " ".join((REPO / "docs" / "editing-code.md").read_text().split())
    assert " ".join(fixed.split()) in page


def test_the_python_api_page_names_every_public_name():
    import executor

    page = (REPO / "docs" / "python-api.md").read_text()
    missing = [name for name in executor.__all__ if not re.search(rf"(?<![\w.]){name}(?!\w)", page)]
    assert not missing, f"executor.__all__ names missing from docs/python-api.md: {missing}"


def test_the_site_builds_strictly_offline(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    external = [(page.name, m) for page in tmp_path.rglob("*.html")
                for m in re.findall(r'<(?:link|script)[^>]+(?:href|src)="(https?://[^"]+)', page.read_text())]
    assert not external, f"the site loads assets from the network: {external[:5]}"  # fonts, analytics, CDNs


def _code_text() -> str:
    return "\n".join(p.read_text() for p in REPO.joinpath("executor").rglob("*.py"))


def test_messages_quoted_in_troubleshooting_are_what_the_code_says():
    page = (REPO / "docs" / "troubleshooting.md").read_text()
    quoted = re.findall(r'^## "(.+)"$', page, flags=re.M) + re.findall(r'\("(running elsewhere: )', page)
    assert quoted, "troubleshooting.md quotes no message"
    code = _code_text()
    for message in quoted:
        for fragment in filter(None, (f.strip(" ;") for f in message.split("…"))):
            assert fragment in code, f"docs/troubleshooting.md quotes {fragment!r}, which no module says"


def test_relative_links_of_the_readme_resolve():
    readme = (REPO / "README.md").read_text()
    for target in re.findall(r"\]\(((?!https?:|#)[^)#\s]+)", readme):
        assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"


def _state_table() -> list[list[set[str]]]:
    """docs/concepts.md's table of a step's state: per row, per column, the `words` in it."""
    section = (REPO / "docs" / "concepts.md").read_text().split("## Three vocabularies", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("|--")]
    return [[set(re.findall(r"`([^`]+)`", cell)) for cell in row.strip().strip("|").split("|")] for row in rows[1:]]


def test_the_state_table_maps_every_word_of_the_three_vocabularies():
    from executor.core.outcome import Ending, Outcome, outcome_of_action, outcome_of_state
    from executor.core.plan import Action
    from executor.core.record import Absent, State

    rows = _state_table()
    assert rows and all(len(row) == 4 for row in rows), rows
    columns = [set().union(*(row[i] for row in rows)) for i in range(4)]
    for column, words in enumerate(([*State, *Absent], Action, Outcome, Ending)):
        missing = sorted(w.value for w in words if w.value not in columns[column])
        assert not missing, f"docs/concepts.md's state table lacks {missing} in column {column + 1}"
    for stored, decided, outcomes, _ in rows:  # the table agrees with executor/core/outcome.py
        for state in (s for s in State if s.value in stored):
            assert outcome_of_state(state).value in outcomes, (state, outcomes)
        for action in (a for a in Action if a.value in decided and outcome_of_action(a).ended):
            assert outcome_of_action(action).value in outcomes, (action, outcomes)
