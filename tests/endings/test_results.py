"""What a step returns, as stored and shown (issue 12, item 11), and --max-concurrent bounds (item 5)."""

from __future__ import annotations

import json

import pytest

from executor.cli import run
from executor.engine.prefix.results import RESULT_LIMIT_BYTES
from tests.endings import gated
from tests.endings.gated import Options, build
from tests.endings.harness import Driver, assert_clean, statuses


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def record(tmp_path, name: str) -> dict:
    (path,) = (tmp_path / "prefix" / "end").glob(f"{name}-*/.executor/record.json")
    return strict_json(path.read_text())


def test_non_finite_floats_are_stored_as_portable_json(local, sidefx, tmp_path):
    d = Driver(local, sidefx, tmp_path / "run.log", first="nan")
    assert d.wait() == 0, d.output()[-3000:]
    assert record(tmp_path, "first")["result"] == {"loss": "NaN", "best": "Infinity", "worst": "-Infinity"}
    for path in (tmp_path / "prefix").rglob("*.json"):
        strict_json(path.read_text())  # every file under the prefix is JSON a strict parser accepts


def test_a_large_return_value_is_kept_but_not_echoed(local, sidefx, tmp_path):
    d = Driver(local, sidefx, tmp_path / "run.log", first="big:1")
    assert d.wait() == 0, d.output()[-3000:]
    assert len(record(tmp_path, "first")["result"]["blob"]) == 2**20
    assert len(d.output()) < 10_000 and "(1,048,576 chars)" in d.output()


def test_a_return_value_over_the_limit_fails_the_step_clearly(local, sidefx, tmp_path):
    mb = RESULT_LIMIT_BYTES / 2**20 * 12
    d = Driver(local, sidefx, tmp_path / "run.log", first=f"big:{mb:g}")
    assert d.wait() == 1, d.output()[-3000:]
    assert len(d.output()) < 20_000
    found = assert_clean(local, d, 1)
    assert found["first"]["state"] == "FAILED"
    assert "MiB of JSON" in found["first"]["error"] and "config.output_path" in found["first"]["error"]


@pytest.mark.parametrize("value", ["0", "-1"])
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_max_concurrent_below_one_is_a_usage_error(tmp_path, capsys, value, dry):
    argv = ["--prefix", str(tmp_path), "--runner", "ray", "--max-concurrent", value, *(["--dry-run"] if dry else [])]
    assert run(build, config=Options(), argv=argv, environ={}, main_file=gated.__file__) == 2
    assert f"--max-concurrent {value}: must be at least 1" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
