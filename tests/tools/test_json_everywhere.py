"""`--json` is JSON wherever it is offered (issue 47): every command whose --help lists --json prints
one JSON document on stdout, for a step, an experiment, the whole prefix, and for its errors too
(an error is `{"error": ..., "exit_code": 2}` on stdout, and the usual line on stderr)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from executor.__main__ import build_parser, main

# every command offering --json, with the argument lists that exercise it (see test_every_json_command_is_here)
JSON_COMMANDS = ("status", "runs", "tags", "lineage")


def run_split(*argv: str) -> tuple[int, str, str]:
    """`stepgraph argv...` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def json_of(*argv: str) -> tuple[int, object, str]:
    code, out, err = run_split(*argv)
    try:
        return code, json.loads(out), err
    except json.JSONDecodeError:
        pytest.fail(f"`stepgraph {' '.join(argv)}` printed no JSON (exit {code}):\n{out}\n{err}")


def test_every_json_command_is_here():
    offering = sorted(name for name, parser in build_parser().commands.items() if "--json" in parser.options)
    assert offering == sorted(JSON_COMMANDS), "a command offers --json: add its cases to this file"


def test_status_of_one_step_by_name_and_by_id_is_json(ran_toy):
    prefix = ran_toy.prefix
    code, by_name, _ = json_of("status", "toy/train", "--prefix", prefix, "--json")
    assert code == 0 and by_name["step_id"].startswith("toy/train-"), by_name
    assert by_name["state"] == "SUCCESS" and by_name["status"]["state"] == "SUCCESS"
    assert by_name["record"]["provenance"]["function"].endswith(":train") and by_name["record_problem"] is None
    code, by_id, _ = json_of("status", by_name["step_id"], "--prefix", prefix, "--json")
    assert code == 0 and by_id == by_name


def test_status_of_a_step_without_status_is_json_and_exit_1(ran_toy):
    never = Path(ran_toy.prefix, "toy", "never-000000000000")
    never.mkdir(parents=True)
    code, shown, _ = json_of("status", str(never), "--json")
    assert code == 1 and shown["state"] == "NO STATUS" and shown["status"] is None


def test_status_of_the_prefix_and_of_an_experiment_and_runs_are_json(ran_toy):
    code, rows, _ = json_of("status", "--prefix", ran_toy.prefix, "--json")
    assert code == 0 and len(rows) == 4 and {r["state"] for r in rows} == {"SUCCESS"}
    code, rows, _ = json_of("status", str(ran_toy.path), "--prefix", ran_toy.prefix, "--json")
    assert code == 0 and sorted(r["name"] for r in rows) == ["toy/raw", "toy/report", "toy/tokenize", "toy/train"]
    code, runs, _ = json_of("runs", "--prefix", ran_toy.prefix, "--json")
    assert code == 0 and len(runs) == 1 and runs[0]["exit_code"] == 0


def test_tags_and_lineage_are_json(ran_toy):
    code, tags, _ = json_of("tags", "--prefix", ran_toy.prefix, "--json")
    assert code == 0 and tags == []
    assert run_split("tag", "toy/train", "toy-train@1", "--prefix", ran_toy.prefix)[0] == 0
    code, tags, _ = json_of("tags", "--prefix", ran_toy.prefix, "--json")
    assert code == 0 and [(t["tag"], t["step_id"][:10]) for t in tags] == [("toy-train@1", "toy/train-")]
    code, up, _ = json_of("lineage", "toy/report", "--prefix", ran_toy.prefix, "--json")
    assert code == 0 and up["direction"] == "up" and up["nodes"][0]["step_id"].startswith("toy/report-")
    assert {n["step_id"].split("-")[0] for n in up["nodes"]} >= {"toy/report", "toy/train"}, up


ARGUMENTS = {"lineage": ("toy/train",)}  # what a command needs besides --prefix and --json


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_errors_are_json_too(command, tmp_path):
    code, error, err = json_of(command, *ARGUMENTS.get(command, ()), "--prefix", str(tmp_path / "missing"), "--json")
    assert code == 2 and error["exit_code"] == 2 and "does not exist" in error["error"]
    assert err.strip() == f"error: {error['error']}"


def test_a_missing_step_and_a_corrupt_status_are_json(ran_toy):
    code, error, _ = json_of("status", "toy/nosuch", "--prefix", ran_toy.prefix, "--json")
    assert code == 2 and "no step 'toy/nosuch'" in error["error"]
    train = next(Path(ran_toy.prefix, "toy").glob("train-*"))
    (train / ".executor" / "status.json").write_text("{garbage")
    code, error, _ = json_of("status", str(train), "--json")
    assert code == 2 and "corrupt status file" in error["error"] and "repair --delete-status" in error["error"]


def test_a_dry_run_refused_with_json_prints_json(toy):
    code, out, err = toy.run("--dry-run", "--json", "--max-concurrent", "0", split=True)
    assert code == 2 and json.loads(out)["error"] in err
