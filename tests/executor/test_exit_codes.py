"""One exit-code enum (executor/core/exit_codes.py): its values, --help lists them, nobody else defines one."""

from __future__ import annotations

import ast
from pathlib import Path

from executor.__main__ import build_parser
from executor.core.exit_codes import MEANINGS, ExitCode, for_signal

EXECUTOR = Path(__file__).resolve().parents[2] / "executor"
SIGNAL_CODES = {130, 141, 143}


def test_the_values_are_the_documented_ones():
    assert {code.name: int(code) for code in ExitCode} == {
        "OK": 0, "FAILED": 1, "USAGE": 2, "CHANGED": 3, "INTERRUPTED": 130, "BROKEN_PIPE": 141, "TERMINATED": 143}
    assert set(MEANINGS) == set(ExitCode)
    assert for_signal(2) is ExitCode.INTERRUPTED and for_signal(15) is ExitCode.TERMINATED
    assert for_signal(1) == 129 and not isinstance(for_signal(1), ExitCode)  # a signal we don't handle


def test_help_lists_every_exit_code_with_its_meaning():
    text = build_parser().format_help()
    for code in ExitCode:
        assert f"{int(code):>3}  {MEANINGS[code]}" in text, code
    assert "FAILED or CORRUPT" in MEANINGS[ExitCode.FAILED]  # status's own rule is documented


def _own_exit_codes(path: Path) -> list[str]:
    """Names bound to exit-code-looking constants, and bare signal exit codes, in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id.isupper() and "EXIT" in node.id:
            found.append(f"{path.name}:{node.lineno} assigns {node.id}")
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in SIGNAL_CODES:
            found.append(f"{path.name}:{node.lineno} writes {node.value}")
    return found


def test_no_module_defines_its_own_exit_codes():
    modules = [p for p in EXECUTOR.rglob("*.py") if p != EXECUTOR / "core" / "exit_codes.py"]
    assert len(modules) > 40
    found = [f for p in modules for f in _own_exit_codes(p)]
    assert not found, f"exit codes live in executor/core/exit_codes.py only: {found}"


def test_the_check_catches_a_module_of_its_own(tmp_path):
    module = tmp_path / "rogue.py"
    module.write_text("EXIT_OK, EXIT_BAD = 0, 1\n\ndef f():\n    code = 141\n    return code\n")
    assert _own_exit_codes(module) == ["rogue.py:1 assigns EXIT_OK", "rogue.py:1 assigns EXIT_BAD",
                                       "rogue.py:4 writes 141"]
