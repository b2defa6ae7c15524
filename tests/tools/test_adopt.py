"""Adopt: a new id declared equivalent to a completed output; re-runs skip, dependents read the old path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.engine.prefix.prefixes import open_prefix
from executor.tools.adopt import adopt
from executor.core.errors import ExecutorError
from executor.tools.loading import load_experiment

from .toy import run_main

OLD_TEXT_SUFFIX = "to be or not to be"


def _record(prefix: str, step_dir: str) -> dict:
    return json.loads(Path(prefix, step_dir, ".executor", "record.json").read_text())


def _ids(toy) -> dict[str, str]:
    return {n.name: n.step_id for n in load_experiment(toy.path).graph.nodes.values()}


def test_adopt_makes_a_rerun_skip_and_dependents_resolve_to_the_adopted_output(ran_toy):
    old = _ids(ran_toy)
    ran_toy.write(TEXT=repr("to  be or not to be"))  # a cosmetic change that re-addresses toy/raw
    new = _ids(ran_toy)
    assert new["toy/raw"] != old["toy/raw"]

    code, out = run_main("adopt", "--prefix", ran_toy.prefix, str(ran_toy.path), "toy/raw",
                         "--from", old["toy/raw"], "--reason", "whitespace only")
    assert code == 0, out
    assert f"{new['toy/raw']} is now an alias of {old['toy/raw']}" in out
    assert "config.text: 'to be or not to be' -> 'to  be or not to be'" in out

    code, out = ran_toy.run("--dry-run", "--json")
    reasons = {s["name"]: (s["action"], s["reason"]) for s in json.loads(out)["steps"]}
    assert reasons["toy/raw"] == ("skip", f"succeeded (adopted from {old['toy/raw']})")
    assert reasons["toy/tokenize"][0] == "run"  # re-addressed through the new digest: it runs, reading the old output

    code, out = ran_toy.run("--runner", "inline")
    assert code == 0, out
    assert "▶ toy/raw" not in out  # the adopted step did not run
    assert not (Path(ran_toy.prefix) / new["toy/raw"] / "raw.txt").exists()
    tokenize = _record(ran_toy.prefix, new["toy/tokenize"])
    assert tokenize["config"]["input_path"] == f"{ran_toy.prefix}/{old['toy/raw']}/raw.txt"

    status = json.loads(Path(ran_toy.prefix, new["toy/raw"], ".executor", "status.json").read_text())
    assert status["state"] == "SUCCESS" and status["alias_of"]["step_id"] == old["toy/raw"]
    assert status["alias_of"]["reason"] == "whitespace only" and "@" in status["alias_of"]["declared_by"]
    assert _record(ran_toy.prefix, old["toy/raw"])["step_id"] == old["toy/raw"]  # the old record is untouched


def test_adopt_refuses_unsafe_declarations(ran_toy):
    old = _ids(ran_toy)
    graph = load_experiment(ran_toy.path).graph
    who = {"user": "t", "host": "h", "pid": 1}
    with pytest.raises(ExecutorError, match="no status"):
        adopt(graph, "toy/raw", "toy/raw-000000000000", open_prefix(ran_toy.prefix), reason=None, declared_by=who)
    with pytest.raises(ExecutorError, match="already has a status"):  # the new id already ran
        adopt(graph, "toy/train", old["toy/raw"], open_prefix(ran_toy.prefix), reason=None, declared_by=who)
    with pytest.raises(ExecutorError, match="nothing to adopt"):
        adopt(graph, "toy/raw", old["toy/raw"], open_prefix(ran_toy.prefix), reason=None, declared_by=who)
    with pytest.raises(ExecutorError, match="no step named"):
        adopt(graph, "toy/nope", old["toy/raw"], open_prefix(ran_toy.prefix), reason=None, declared_by=who)

    status = Path(ran_toy.prefix, old["toy/report"], ".executor", "status.json")
    failed = json.loads(status.read_text()) | {"state": "FAILED", "error": "boom"}
    status.write_text(json.dumps(failed))
    ran_toy.write(VOCAB="8192")
    graph = load_experiment(ran_toy.path).graph
    with pytest.raises(ExecutorError, match="FAILED, not SUCCESS"):
        adopt(graph, "toy/report", old["toy/report"], open_prefix(ran_toy.prefix), reason=None, declared_by=who)


def test_adopt_requires_a_reason_and_refuses_another_step_or_config_type_unless_forced(ran_toy):
    old = _ids(ran_toy)
    ran_toy.write(TEXT=repr("to  be or not to be"))
    new = _ids(ran_toy)
    base = ["adopt", "--prefix", ran_toy.prefix, str(ran_toy.path)]
    code, out = run_main(*base, "toy/raw", "--from", old["toy/raw"])
    assert code == 2 and "the following arguments are required: --reason" in out
    code, out = run_main(*base, "toy/raw", "--from", old["toy/report"], "--reason", "looks alike")
    assert code == 2 and "it is an output of step 'toy/report', not 'toy/raw'" in out
    assert "its config is a ReportConfig, not a RawConfig" in out and "--force" in out
    assert not Path(ran_toy.prefix, new["toy/raw"]).exists()  # nothing written
    code, out = run_main(*base, "toy/raw", "--from", old["toy/report"], "--reason", "I know", "--force")
    assert code == 0, out
    assert json.loads(Path(ran_toy.prefix, new["toy/raw"], ".executor/status.json").read_text())[
        "alias_of"]["step_id"] == old["toy/report"]


def test_adopt_dry_run_writes_nothing_and_a_chain_is_adopted_in_one_command(ran_toy):
    old = _ids(ran_toy)
    ran_toy.write(TEXT=repr("to  be or not to be"))  # re-addresses raw, and through it everything downstream
    new = _ids(ran_toy)
    base = ["adopt", "--prefix", ran_toy.prefix, str(ran_toy.path), "toy/raw", "--from", old["toy/raw"],
            "--reason", "whitespace only", "--with-dependents"]
    before = sorted(Path(ran_toy.prefix).rglob("*"))
    code, out = run_main(*base, "--dry-run")
    assert code == 0 and out.count("would adopt:") == 4 and "nothing written" in out, out
    assert sorted(Path(ran_toy.prefix).rglob("*")) == before

    code, out = run_main(*base)
    assert code == 0 and out.count("adopted:") == 4, out
    for name in ("toy/tokenize", "toy/train", "toy/report"):
        assert f"{new[name]} is now an alias of {old[name]}" in out
    code, out = ran_toy.run("--dry-run", "--json")
    assert {s["action"] for s in json.loads(out)["steps"]} == {"skip"}  # nothing left to run
