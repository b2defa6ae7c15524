"""Flags are parsed by their declared type, never as YAML; typos and silent coercions are errors.

Issues 19.2, 19.6, 20.4 and 12.8/12.9: `--greeting yes` is the text "yes", regexes are taken
literally, an exact step name always selects that step, and a bad value names the flag and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from executor import ExecutorStep, this_output_path
from executor.cli import parse_flags, run
from executor.core.errors import ExecutorError
from experiments import hello


def hello_run(prefix: Path, *args: str) -> int:
    return run(hello.build, "hello", config=hello.HelloOptions(),
               argv=["--prefix", str(prefix), "--runner", "inline", *args], environ={},
               main_file=hello.__file__)


def shout_text(prefix: Path) -> str:
    return next(prefix.glob("hello/shout-*/shout.txt")).read_text()


@pytest.mark.parametrize("value", ["yes", "on", "null", "*hi", "[a", "~", "1e3", "{x: 1}"])
def test_a_str_flag_is_the_text_typed(tmp_path, value):
    options, user = parse_flags(["--greeting", value], hello.HelloOptions())
    assert user.greeting == value


def test_yes_and_on_are_different_greetings_and_reach_the_step_verbatim(tmp_path):
    assert hello_run(tmp_path, "--greeting", "yes") == 0
    assert shout_text(tmp_path) == "YES!"  # not TRUE!
    ids = {p.name for p in tmp_path.glob("hello/greeting-*")}
    assert hello_run(tmp_path, "--greeting", "on") == 0
    assert len({p.name for p in tmp_path.glob("hello/greeting-*")} - ids) == 1  # its own id


def test_typed_values_and_errors_name_the_flag(capsys):
    options, user = parse_flags(["--max-concurrent=3", "--no-force-failed", "--pause-s", "1.5", "--fail_shout",
                                 "yes", "--only", "*a"], hello.HelloOptions())
    assert options.max_concurrent == 3 and options.force_failed is False and options.only == "*a"
    assert user.pause_s == 1.5 and user.fail_shout is True
    with pytest.raises(ExecutorError, match=r"--fail-shout: 'maybe' is not a boolean"):
        parse_flags(["--fail-shout=maybe"], hello.HelloOptions())
    with pytest.raises(ExecutorError, match=r"--greeting needs a value"):
        parse_flags(["--greeting"], hello.HelloOptions())


@dataclass(frozen=True)
class Sweep:
    widths: tuple[int, ...] = (32, 64)
    budgets: list[float] = field(default_factory=lambda: [1e10])
    tags: dict[str, str] = field(default_factory=dict)


def test_containers_take_a_comma_list_or_yaml():
    _, user = parse_flags(["--widths", "8,16", "--budgets", "[3e10, 1e11]", "--tags", "{a: b}"], Sweep())
    assert user.widths == (8, 16) and user.budgets == [3e10, 1e11] and user.tags == {"a": "b"}
    with pytest.raises(ExecutorError, match=r"--widths: 'x' is not an integer"):
        parse_flags(["--widths", "8,x"], Sweep())


def test_did_you_mean_for_executor_and_experiment_flags(tmp_path, capsys):
    assert hello_run(tmp_path, "--dryrun") == 2
    assert "unknown flag --dryrun; did you mean --dry-run?" in capsys.readouterr().err
    assert hello_run(tmp_path, "--greting", "Hi") == 2
    assert "did you mean --greeting?" in capsys.readouterr().err
    assert not tmp_path.joinpath("runs").exists()


@pytest.mark.parametrize("args, message", [
    (["--runner", "bogus"], "--runner: 'bogus' is not one of auto, ray, inline"),
    (["--prefix", ""], "--prefix '': an empty prefix"),
    (["--json"], "--json only apply to a dry run; add --dry-run"),
    (["--graph", "g.html"], "--graph only apply to a dry run"),
    (["--json", "--check"], "--json only apply to a dry run"),  # --check and --explain print text only
    (["--json", "--explain", "hello/shout"], "--json only apply to a dry run"),
    (["--max-concurrent", "0"], "--max-concurrent 0: must be at least 1"),
    (["--force-run", "(x"], "--force-run '(x' names no step and is not a valid regular expression"),
    (["--only", "*a"], "--only '*a' names no step and is not a valid regular expression"),
    (["--force-run", "[a"], "--force-run '[a' names no step and is not a valid regular expression"),
    (["--force-run", "nothing-like-this"], "--force-run 'nothing-like-this' matches no step"),
])
def test_silent_coercions_are_usage_errors(tmp_path, capsys, args, message):
    assert hello_run(tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not tmp_path.joinpath("runs").exists()  # nothing ran


def test_prefix_values_are_taken_literally(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for value in ("null", "&p", "[1,2]"):
        options, _ = parse_flags(["--prefix", value, "--dry-run"], None)
        assert options.prefix == value


def _plus_step(name: str) -> ExecutorStep:
    return ExecutorStep(name, hello.write_greeting, hello.GreetingConfig(name, this_output_path()))


def test_an_exact_name_selects_its_step_even_with_regex_characters(tmp_path, capsys):
    steps = [_plus_step("iso/eval-3e+10-d32"), _plus_step("iso/eval-3e+100-d32")]
    argv = ["--prefix", str(tmp_path), "--runner", "inline"]
    assert run(steps, argv=[*argv, "--only", "iso/eval-3e+10-d32"], environ={}) == 0
    assert [p.name.rsplit("-", 1)[0] for p in tmp_path.glob("iso/*")] == ["eval-3e+10-d32"]
    capsys.readouterr()
    assert run(steps, argv=[*argv, "--force-run", "iso/eval-3e+10-d32", "--dry-run"], environ={}) == 0
    out = capsys.readouterr().out
    assert "--force-run matches" in out and out.count("--force-run matches") == 1


def test_help_spells_flags_as_the_docs_do(capsys):
    assert run(hello.build, config=hello.HelloOptions(), argv=["--help"]) == 0
    out = capsys.readouterr().out
    assert "  --fail-shout " in out and "--pause-s float" in out and "--fail_shout" not in out
    assert "--fail-shout bool" not in out  # a switch is shown as one, in the shape of argparse's --help
    assert "--runner auto|ray|inline" in out
    reference = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for flag in ("--dry-run", "--only", "--force-run", "--force-failed", "--max-concurrent", "--prefix"):
        assert f"  {flag} " in out and flag in reference
