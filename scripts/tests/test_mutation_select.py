"""scripts/mutation_select.py: each mutant runs the tests that execute its line first, and all the
target's tests when those pass, so a selected run's outcome is the full run's."""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import mutation  # noqa: E402
import mutation_select  # noqa: E402
from mutation_outcomes import Target  # noqa: E402

SOURCE = textwrap.dedent('''\
    import functools


    @functools.cache
    def total(a,
              b):
        if (a >
                b):
            return a - b
        return a + b
    ''')


def test_the_mutated_lines_are_found_by_comparing_with_the_pristine_copy():
    mutated = SOURCE.replace("return a - b", "return a + b")
    assert mutation_select.changed_lines(SOURCE, mutated) == {9}
    assert mutation_select.changed_lines(SOURCE, SOURCE) == set()


def test_a_line_stands_for_its_whole_statement_and_a_compound_statement_for_its_header_only():
    tree = ast.parse(SOURCE)
    assert list(mutation_select.statement_span(tree, 8)) == [7, 8]       # `if (a >\n b):` not its body
    assert list(mutation_select.statement_span(tree, 6)) == [4, 5, 6]    # def header with its decorator
    assert list(mutation_select.statement_span(tree, 9)) == [9]


def test_the_covering_tests_are_those_of_any_line_of_the_statement_and_none_means_all():
    covered = {"7": ["t.py::test_a", "t.py::test_b"], "9": ["t.py::test_b"], "4": [""], "5": [""]}
    assert mutation_select.covering_tests(covered, {8}, SOURCE) == ["t.py::test_a", "t.py::test_b"]
    assert mutation_select.covering_tests(covered, {9}, SOURCE) == ["t.py::test_b"]
    assert mutation_select.covering_tests(covered, {10}, SOURCE) is None   # no test executed it
    assert mutation_select.covering_tests(covered, {6}, SOURCE) is None    # runs at import: any test may see it


def test_a_mutant_the_covering_tests_miss_is_still_killed_by_a_test_coverage_cannot_see(tmp_path, capfd,
                                                                                       monkeypatch):
    """The real chain: a coverage run with test contexts, then mutants judged by the selection. A test
    that runs the module in a subprocess covers nothing in-process, yet it decides the outcome."""
    (tmp_path / "calc.py").write_text("def double(x):\n    return 2 * x\n\n\ndef half(x):\n    return x / 2\n")
    (tmp_path / "test_calc.py").write_text(textwrap.dedent('''\
        import subprocess, sys
        import calc

        def test_double_in_process():
            assert calc.double(3) > 0

        def test_half_in_process():
            assert calc.half(4) == 2

        def test_double_in_a_subprocess():
            code = "import calc; assert calc.double(3) == 6"
            subprocess.run([sys.executable, "-c", code], cwd=calc.__file__.rsplit("/", 1)[0], check=True)
        '''))
    monkeypatch.chdir(tmp_path)                                  # cosmic-ray runs the command in the copy
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")           # as cosmic-ray does: no stale bytecode
    target = Target("calc", ("calc.py",), ("test_calc.py",))
    (tmp_path / mutation.SELECT_DIR).mkdir()
    assert mutation.prepare_selection(target, tmp_path, sys.executable) > 0
    config_path = str(tmp_path / mutation.SELECT_DIR / "calc.json")
    config = json.loads(Path(config_path).read_text())
    assert config["covered"]["calc.py"]["2"] == ["test_calc.py::test_double_in_process"]

    def judge(mutated_source: str) -> tuple[int, str]:
        (tmp_path / "calc.py").write_text(mutated_source)
        code = mutation_select.main(config_path)
        return code, capfd.readouterr().out

    pristine = (Path(config["pristine"]) / "calc.py").read_text()
    code, out = judge(pristine.replace("x / 2", "x * 2"))       # the covering test fails: done
    assert code == 1 and "1 covering tests first" in out and "all target tests" not in out
    code, out = judge(pristine.replace("2 * x", "3 * x"))       # it passes; the subprocess test kills
    assert code == 1 and "covering tests exit 0" in out and "all target tests exit 1" in out
    from mutation_outcomes import first_lines, tests_seconds
    took = tests_seconds(out)  # its last line: the tests' time, which the report shows per mutant
    assert out.strip().splitlines()[-1].startswith("mutation_select: tests took ") and 0 < took < 300, out
    kept = first_lines(out, 2).splitlines()
    assert kept[:2] == out.strip().splitlines()[:2]  # its first lines, then what failed
    assert all(line.startswith(("FAILED ", "ERROR ")) for line in kept[3:]) and any("FAILED " in k for k in kept)


def test_a_test_that_hangs_on_a_mutant_is_ended_at_the_hang_limit_and_scored_timed_out(tmp_path, capfd,
                                                                                       monkeypatch):
    """Target.hang_s: the selection runs each test under pytest-timeout, so a mutant that makes a
    test hang is found in seconds, and its output makes it timed out, not killed."""
    from mutation_outcomes import Outcome, classify

    (tmp_path / "calc.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "test_calc.py").write_text(textwrap.dedent('''\
        import calc

        def test_double():
            while calc.double(1) != 2:  # another value: the test hangs
                pass
        '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    target = Target("calc", ("calc.py",), ("test_calc.py",), hang_s=1.5)
    (tmp_path / mutation.SELECT_DIR).mkdir()
    mutation.prepare_selection(target, tmp_path, sys.executable)
    config_path = str(tmp_path / mutation.SELECT_DIR / "calc.json")
    assert json.loads(Path(config_path).read_text())["pytest"][-1] == "--timeout=1.5"
    (tmp_path / "calc.py").write_text("def double(x):\n    return 2 + x\n")
    code = mutation_select.main(config_path)
    out = capfd.readouterr().out
    assert code == 1 and "Timeout (>1.5s)" in out
    assert classify("normal", "killed", out) is Outcome.TIMED_OUT
