"""Every `stepgraph COMMAND --help` ends the same way: examples that parse with the real parser
(so none names a flag that does not exist) and the exit codes that command returns."""

from __future__ import annotations

import argparse
import shlex

import pytest

from executor.__main__ import build_parser
from executor.core.exit_codes import ExitCode
from executor.tools import command_help


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_has_examples_and_exit_codes():
    assert set(command_help.EXAMPLES) == set(_commands())
    for name, parser in _commands().items():
        text = parser.format_help()
        assert "\nexamples:\n" in text and "\nexit codes:\n" in text, name
        codes = [code for code, _ in command_help.exits(name)]
        assert ExitCode.OK in codes and ExitCode.USAGE in codes, name
        for code, meaning in command_help.exits(name):
            assert f"{int(code):>3}  {meaning}" in text


@pytest.mark.parametrize("name, example", [(n, e) for n, es in command_help.EXAMPLES.items() for e in es])
def test_each_example_parses(name, example):
    words = shlex.split(example.removeprefix('eval "$(').removesuffix(')"'))
    assert words[:2] == ["stepgraph", name]
    argv = words[1:words.index("--")] if "--" in words else words[1:]
    args = build_parser().parse_args(argv)  # argparse exits (SystemExit) on an unknown flag or a missing argument
    assert args.command == name
