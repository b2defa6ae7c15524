"""Every command line the docs show in a bash block names things that exist: a `stepgraph`
command and its flags, an experiment file and its flags (executor and experiment flags, as its
`--help` lists them), a script, a module. Commands shown are not run here (some take minutes or
a bucket); a renamed flag or a removed command fails this test instead of a reader."""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys

import pytest

from tests.docs.markdown import REPO, all_blocks
from tests.tools.toy import run_main


def _command_lines() -> list[tuple[str, str]]:
    """(where, line) for each command in the docs' bash blocks, continuation lines joined."""
    found = []
    for block in all_blocks():
        if block.language not in ("bash", "sh", "shell"):
            continue
        pending = ""
        for line in block.text.replace("\\\n", " ").splitlines():
            pending += line + "\n"
            try:
                words = shlex.split(pending, comments=True)
            except ValueError:  # a quoted value that goes on over the next line (a JSON object)
                continue
            pending = ""
            if words:
                found.append((block.where, words))
        assert not pending, f"{block.where}: an unclosed quote in a shown command"
    return found


def _strip_uv(words: list[str]) -> list[str]:
    if words[:2] != ["uv", "run"]:
        return words
    words = words[2:]
    while words and words[0].startswith("--"):  # uv's own options: --project DIR, --extra NAME, --no-sync
        words = words[2:] if words[0] in ("--project", "--extra", "--with", "--group") else words[1:]
    return words


@functools.cache
def _help(*argv: str) -> str:
    """`python ARGV --help`'s text. `-m executor ...` runs in this process (the same parser, 22 fewer
    interpreter starts); an experiment runs in its own process (importing one here costs more)."""
    if argv[:2] == ("-m", "executor"):
        code, text = run_main(*argv[2:], "--help")
        assert code == 0, f"stepgraph {' '.join(argv[2:])} --help failed:\n{text[-2000:]}"
        return text
    done = subprocess.run([sys.executable, *argv, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=None)
    assert done.returncode == 0, f"{' '.join(argv)} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout


def _flags(words: list[str]) -> list[str]:
    flags = []
    for word in words:
        if word.startswith("--") and len(word) > 2:
            flag = word.split("=", 1)[0]
            flags.append("--" + flag[5:] if flag.startswith("--no-") else flag)
    return flags


def _missing_flags(words: list[str], help_text: str) -> list[str]:
    return [f for f in _flags(words) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text)]


def _check_experiment(path: str, flags: list[str]) -> list[str]:
    assert (REPO / path).is_file(), f"{path} does not exist"
    return _missing_flags(flags, _help(path))


def _problems(words: list[str]) -> list[str]:
    words = _strip_uv(words)
    if words[:2] == ["python", "-m"]:
        module = words[2]
        return [] if importlib.util.find_spec(module) else [f"no module {module}"]
    if words[:1] == ["python"] and words[1].endswith(".py"):
        path = words[1]
        if path.startswith("experiments/"):
            return _check_experiment(path, words[2:])
        if path.startswith("scripts/"):
            return [] if (REPO / path).is_file() else [f"{path} does not exist"]
        return []  # a reader's own file (the tutorial's lengths.py, ~/work/...)
    if words[:1] == ["stepgraph"]:
        if len(words) == 1 or words[1].startswith("-"):
            return _missing_flags(words[1:], _help("-m", "executor"))
        command, rest = words[1], words[2:]
        if command == "run":  # stepgraph run EXPERIMENT FLAGS: the experiment's own command line
            return _check_experiment(rest[0], rest[1:])
        ours, theirs = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
        problems = _missing_flags(ours, _help("-m", "executor", command))
        experiments = [w for w in ours if w.startswith("experiments/") and w.endswith(".py")]
        if theirs and experiments:
            problems += _check_experiment(experiments[0], theirs)
        return problems
    return []


COMMANDS = _command_lines()


def test_a_command_is_shown_the_way_it_runs():
    """A bare `stepgraph ...` at the start of a shell line is "command not found" on a fresh clone
    (the script lives in the project's environment): the docs show `uv run stepgraph ...` (issue 47)."""
    bare = [f"{where}: {shlex.join(words)}" for where, words in COMMANDS if words[0] == "stepgraph"]
    assert not bare, "write these as `uv run stepgraph ...`:\n" + "\n".join(bare)


def test_the_docs_show_commands_to_check():
    assert len(COMMANDS) > 40  # the extraction itself works


@pytest.mark.parametrize("where, words", COMMANDS, ids=[f"{w} {' '.join(c)[:60]}" for w, c in COMMANDS])
def test_a_command_shown_names_what_exists(where, words):
    problems = _problems(words)
    assert not problems, f"{where}: `{shlex.join(words)}`: {problems}"
