"""The test command cosmic-ray runs for each mutant: the tests that execute the mutated line first.

    python scripts/mutation_select.py .mutation/<target>.json

cosmic-ray mutates a module in place and runs this. It finds the mutated lines by comparing each
target module with its pristine copy, and runs first only the tests whose coverage context (recorded
once per target on the unmutated code, `pytest --cov-context=test`) executed them. The outcome is
the full run's outcome, only cheaper:
- selected tests fail: killed (every selected test is one of the target's tests);
- they pass: the mutant may still be caught by a test coverage could not see (code run in a Ray
  worker or a subprocess, a fixture set up once for many tests), so all the target's tests run and
  decide;
- no test context covers the line, or it runs at import (the empty context), or anything here goes
  wrong (pytest exits with anything but 1, "tests failed"): all the target's tests run.
The exit status is pytest's, which is what cosmic-ray scores.
"""

from __future__ import annotations

import ast
import difflib
import json
import subprocess
import sys
import time
from pathlib import Path


def changed_lines(pristine: str, mutated: str) -> set[int]:
    """Line numbers (1-based, in the pristine text) that the mutation replaced or removed."""
    matcher = difflib.SequenceMatcher(a=pristine.splitlines(), b=mutated.splitlines(), autojunk=False)
    changed: set[int] = set()
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return changed


def statement_span(tree: ast.Module, line: int) -> range:
    """The lines of the innermost statement holding `line` that run as one (a compound statement's
    header only, not its body): coverage may record any of them for a multi-line statement."""
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno and (node.end_lineno or 0) <= (best.end_lineno or 0):
                best = node
    if best is None:
        return range(line, line + 1)
    first = min([best.lineno] + [d.lineno for d in getattr(best, "decorator_list", [])])
    body = getattr(best, "body", None)
    end = body[0].lineno - 1 if isinstance(body, list) and body and body[0].lineno > line else best.end_lineno
    return range(first, max(end or line, line) + 1)


def covering_tests(covered: dict[str, list[str]], lines: set[int], source: str) -> list[str] | None:
    """Node ids of the tests that executed any of `lines` (their whole statements), in a stable
    order; None when no test context did, or when one of them runs at import (context "")."""
    tree = ast.parse(source)
    found: set[str] = set()
    for line in lines:
        for covered_line in statement_span(tree, line):
            found.update(covered.get(str(covered_line), []))
    if not found or "" in found:
        return None
    return sorted(found)


def mutated_modules(modules: list[str], pristine: Path) -> dict[str, set[int]]:
    """Each target module whose text differs from its pristine copy, with the lines that differ."""
    found = {}
    for module in modules:
        before, after = (pristine / module).read_text(), Path(module).read_text()
        if before != after:
            found[module] = changed_lines(before, after)
    return found


def selection(config: dict) -> list[str] | None:
    """The tests to run first, or None for all of the target's tests."""
    pristine = Path(config["pristine"])
    mutated = mutated_modules(config["modules"], pristine)
    if len(mutated) != 1:
        return None
    [(module, lines)] = mutated.items()
    return covering_tests(config["covered"].get(module, {}), lines, (pristine / module).read_text())


def pytest(command: list[str], args: list[str]) -> int:
    return subprocess.run([*command, *args], stderr=subprocess.STDOUT).returncode


def main(config_path: str) -> int:
    started = time.monotonic()
    try:
        return run_selected(config_path)
    finally:  # the last line of the mutant's output: its tests' time (mutation_outcomes.tests_seconds)
        print(f"mutation_select: tests took {time.monotonic() - started:.1f} s", flush=True)


def run_selected(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    command = config["pytest"]  # as the target's every test run calls pytest (scripts/mutation.py)
    try:
        chosen = selection(config)
    except Exception as e:  # noqa: BLE001 - never let a bug here read as a kill: run everything
        print(f"mutation_select: selection failed ({e!r}); running all tests", flush=True)
        chosen = None
    if chosen is not None:
        print(f"mutation_select: {len(chosen)} covering tests first", flush=True)
        code = pytest(command, chosen)
        print(f"mutation_select: covering tests exit {code}", flush=True)
        if code == 1:  # tests failed; any other status (a node id not found, ...) is not trusted as a kill
            return code
    print("mutation_select: all target tests", flush=True)
    code = pytest(command, config["tests"])
    print(f"mutation_select: all target tests exit {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
