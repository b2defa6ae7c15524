"""Drift: completed outputs whose step function's source changed since they were produced."""

from __future__ import annotations

import json


def test_no_warning_when_the_code_is_unchanged(ran_toy):
    code, out = ran_toy.run("--dry-run")
    assert code == 0 and "changed since" not in out


def test_editing_a_step_function_warns_in_dry_runs_and_real_runs(ran_toy):
    ran_toy.edit_source('Path(config.output_path, "model.json")', 'Path(config.output_path, "model.json")  # edited')
    code, out = ran_toy.run("--dry-run")
    assert code == 0, out
    flat = " ".join(out.split())
    assert "toy/train: the source of train" in flat and "changed since toy/train-" in flat
    assert "code_version" in flat and "--force-run '^toy/train$'" in flat
    assert "toy/tokenize: the source" not in flat  # only the edited function drifted
    code, out = ran_toy.run("--runner", "inline")  # everything skips, and a real run says so too
    assert code == 0 and "toy/train: the source of train" in " ".join(out.split())
    code, out, err = ran_toy.run("--dry-run", "--json", split=True)
    assert code == 0 and "the source of train" in " ".join(err.split())
    assert json.loads(out)["steps"][2]["name"] == "toy/train"  # stdout stays JSON
