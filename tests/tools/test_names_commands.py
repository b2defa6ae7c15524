"""`stepgraph tag / tags / lineage / taint / untaint` on a real prefix: what they print and store,
and their exit codes."""

from __future__ import annotations

import json

from executor import api

from .names_steps import pipeline
from .toy import run_main


def test_the_commands_on_a_prefix(tmp_path):
    prefix = str(tmp_path / "prefix")
    raw, tok, train = pipeline()
    result = api.run([train], prefix=prefix, runner="inline")
    ids = {s.name: s.step_id for s in result.steps}

    code, out = run_main("tag", "names/tok", "tok@1", "--prefix", prefix)
    assert code == 0 and out.startswith(f"tok@1 -> {ids['names/tok']}"), out
    code, out = run_main("tag", "names/raw", "tok@1", "--prefix", prefix)
    assert code == 2 and "already points at" in out and "--force" in out, out
    code, out = run_main("tag", "names/raw", "tok@1", "--prefix", prefix, "--force", "--reason", "raw is better")
    assert code == 0 and "moved from" in out, out
    code, out = run_main("tags", "--json", "--prefix", prefix)
    assert [(t["tag"], t["step_id"]) for t in json.loads(out)] == [("tok@1", ids["names/raw"])]

    code, out = run_main("lineage", "names/train", "--json", "--prefix", prefix)
    walked = json.loads(out)
    assert [n["step_id"] for n in walked["nodes"]] == [ids["names/train"], ids["names/tok"], ids["names/raw"]]
    code, out = run_main("lineage", "names/raw", "--down", "--prefix", prefix)
    # the commits' lineage markers: one listing of the statuses, one of lineage/
    assert code == 0 and "consumed by " + ids["names/train"] in out and "2 listing(s), 0 read(s)" in out, out

    code, out = run_main("taint", "names/tok", "--prefix", prefix, "--reason", "leak")
    assert code == 0 and f"tainted {ids['names/tok']}" in out, out
    code, out = run_main("verify", "--prefix", prefix)
    assert code == 0 and f"⚠ {ids['names/tok']}: tainted (leak, by " in out, out
    planned = {s.name: s.decision for s in api.plan([train], prefix=prefix).steps}
    assert planned == {"names/raw": "skip", "names/tok": "run", "names/train": "run"}
    code, out = run_main("untaint", result.step(tok).digest, "--prefix", prefix, "--reason", "fine")
    assert code == 0 and "untainted" in out, out
    code, out = run_main("untaint", "names/tok", "--prefix", prefix, "--reason", "again")
    assert code == 2 and "is not tainted" in out, out
    code, out = run_main("taint", "names/tok", "--prefix", prefix)
    assert code == 2 and "--reason" in out, out


TAGGED_EXPERIMENT = '''
from executor import ExecutorStep, executor_main, output_of_tag, this_output_path
from tests.tools.names_steps import ReadConfig, upper

reader = ExecutorStep(name="names/reader", fn=upper,
                      config=ReadConfig(output_of_tag("tok@1", "data.txt"), this_output_path(), "?"))

if __name__ == "__main__":
    executor_main(steps=[reader])
'''


def test_commands_that_load_an_experiment_resolve_its_tags_from_the_prefix(tmp_path):
    prefix = str(tmp_path / "prefix")
    tok = pipeline()[1]
    assert api.run([tok], prefix=prefix, runner="inline").ok
    experiment = tmp_path / "tagged.py"
    experiment.write_text(TAGGED_EXPERIMENT)
    code, out = run_main("graph", str(experiment), str(tmp_path / "plan.svg"), "--prefix", prefix)
    assert code == 2 and "no tag 'tok@1' under the prefix" in out and "stepgraph tag STEP tok@1" in out, out
    assert run_main("tag", "names/tok", "tok@1", "--prefix", prefix)[0] == 0
    code, out = run_main("graph", str(experiment), str(tmp_path / "plan.svg"), "--prefix", prefix)
    assert code == 0, out
    code, out = run_main("ids", str(experiment))
    assert code == 2 and "resolved from the prefix's tags" in out, out
