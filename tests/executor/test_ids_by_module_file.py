"""Ids are about what a step makes, not where its code lives (issue 44, DESIGN §10 "Moving code
keeps ids"): copying or renaming the experiment file, importing its steps from another file, or
moving its config classes into another module keeps every id, and outputs made under the ids of
before (classes named with their module) are carried over without running anything.

Every test runs the experiment as a user would (a subprocess, a real prefix on disk).
tests/executor/relocatable_experiment.py holds every kind of class the encoder names by type.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from executor.core.naming import module_name_of_file, qualified_name

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "tests/executor/relocatable_experiment.py"
LEGACY_PREFIX = REPO / "tests/executor/legacy_ids_prefix"  # written before issue 44: see legacy_ids_prefix.txt
LEGACY_IDS = {"relocate/words": "relocate/words-353e93d72276", "relocate/shout": "relocate/shout-def28ca7e7b6",
              "relocate/quiet": "relocate/quiet-ba029f059ce9"}
BEGIN, END = "# --- config classes: begin ---\n", "# --- config classes: end ---\n"
CLASSES = "Case, ShoutConfig, Span, Style, WordsConfig"
CLASS_IMPORTS = "import enum\nfrom collections import namedtuple\nfrom dataclasses import dataclass\n\n"


def _command(script: Path, prefix: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(script), "--prefix", str(prefix), "--runner", "inline", *args],
                         env=env, cwd=script.parent, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out


def _plan(script: Path, prefix: Path, *args: str) -> dict[str, dict]:
    rows = json.loads(_command(script, prefix, "--dry-run", "--json", *args).stdout)["steps"]
    return {row["name"]: row for row in rows}


def _ids(script: Path, prefix: Path) -> dict[str, str]:
    return {name: row["step_id"] for name, row in _plan(script, prefix).items()}


def _run(script: Path, prefix: Path, *args: str) -> str:
    return _command(script, prefix, *args).stdout


def _copy(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(EXPERIMENT.read_text())
    return path


def _with_classes_moved(directory: Path, module: str) -> Path:
    """The experiment with its config classes moved to the module `module` (a file under `directory`)."""
    source = EXPERIMENT.read_text()
    head, rest = source.split(BEGIN)
    block, tail = rest.split(END)
    module_file = directory.joinpath(*module.split(".")).with_suffix(".py")
    module_file.parent.mkdir(parents=True, exist_ok=True)
    for package in module_file.relative_to(directory).parents:
        if package != Path("."):
            (directory / package / "__init__.py").touch()
    module_file.write_text(CLASS_IMPORTS + block)
    experiment = directory / "experiment_moved.py"
    experiment.write_text(f"{head}from {module} import {CLASSES}\n{tail}")
    return experiment


def test_copying_or_renaming_the_experiment_file_keeps_every_id_and_reuses_every_output(tmp_path):
    prefix = tmp_path / "prefix"
    first = _copy(tmp_path / "a", "exp.py")
    assert "3 ran here" in _run(first, prefix)
    ids = _ids(first, prefix)
    copy = _copy(tmp_path / "b", "exp_v2.py")  # how teams iterate: a copy, elsewhere, under another name
    assert _ids(copy, prefix) == ids
    assert "nothing to do" in _run(copy, prefix)
    assert _ids(EXPERIMENT, prefix) == ids  # inside a package (tests.executor.relocatable_experiment)
    module = subprocess.run([sys.executable, "-m", "tests.executor.relocatable_experiment", "--prefix", str(prefix),
                             "--dry-run", "--json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert {r["name"]: r["step_id"] for r in json.loads(module.stdout)["steps"]} == ids, module.stderr[-2000:]


def test_importing_the_steps_from_another_file_keeps_every_id(tmp_path):
    experiment = _copy(tmp_path / "lab", "exp.py")
    ids = _ids(experiment, tmp_path / "p")
    composed = tmp_path / "elsewhere" / "composed.py"
    composed.parent.mkdir()
    composed.write_text(f"import sys\nsys.path.insert(0, {str(experiment.parent)!r})\n"
                        "from exp import Options, build\nfrom executor import executor_main\n\n"
                        "if __name__ == '__main__':\n    executor_main(build, 'composed', config=Options())\n")
    assert _ids(composed, tmp_path / "p") == ids


def test_moving_the_config_classes_into_another_module_keeps_every_id_and_reuses_every_output(tmp_path):
    prefix = tmp_path / "prefix"
    assert "3 ran here" in _run(_copy(tmp_path / "inline", "exp.py"), prefix)
    ids = _ids(_copy(tmp_path / "inline", "exp.py"), prefix)
    for directory, module in ((tmp_path / "flat", "configs"), (tmp_path / "packaged", "lab.common.configs")):
        moved = _with_classes_moved(directory, module)
        assert _ids(moved, prefix) == ids, module
        assert "nothing to do" in _run(moved, prefix)


def digest_of_config(config: object) -> str:
    from executor import ExecutorStep
    from executor.core.graph import build_graph

    return next(iter(build_graph([ExecutorStep("s", print, config)]).nodes))


def test_a_class_is_still_its_name_and_fields():
    """What a class is stays in the id: the same fields under another class name is another id."""
    from dataclasses import make_dataclass

    first, renamed = make_dataclass("WordsConfig", ["text"]), make_dataclass("WordList", ["text"])
    more = make_dataclass("WordsConfig", ["text", "limit"])
    assert digest_of_config(first("a")) != digest_of_config(renamed("a"))
    assert digest_of_config(first("a")) != digest_of_config(more("a", 1))
    other_module = make_dataclass("WordsConfig", ["text"], namespace={"__module__": "somewhere.else"})
    assert digest_of_config(first("a")) == digest_of_config(other_module("a"))  # the documented rule


def _legacy_prefix(tmp_path: Path, *, without: tuple[str, ...] = ()) -> Path:
    prefix = tmp_path / "prefix"
    shutil.copytree(LEGACY_PREFIX, prefix)
    for name in without:
        shutil.rmtree(prefix / LEGACY_IDS[name])
    return prefix


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_prefix_made_with_the_ids_of_before_is_carried_over_without_running_anything(tmp_path):
    prefix = _legacy_prefix(tmp_path)
    experiment = _copy(tmp_path / "lab", "exp.py")  # the file that wrote the prefix (legacy_ids_prefix.txt)
    before = _files(prefix)
    plan = _plan(experiment, prefix)
    assert {name: row["action"] for name, row in plan.items()} == dict.fromkeys(LEGACY_IDS, "skip")
    for name, row in plan.items():
        assert row["step_id"] != LEGACY_IDS[name] and f"adopted from {LEGACY_IDS[name]}" in row["reason"]
    assert _files(prefix) == before, "a dry run writes nothing"
    assert "nothing to do" in _run(experiment, prefix)
    for name, row in plan.items():
        status = json.loads((prefix / row["step_id"] / ".executor/status.json").read_text())
        assert status["state"] == "SUCCESS" and status["alias_of"]["step_id"] == LEGACY_IDS[name]
        record = json.loads((prefix / row["step_id"] / ".executor/record.json").read_text())
        assert record["provenance"]["migration"] == "legacy-ids"
    new_ids = tuple(row["step_id"] for row in plan.values())
    for path in _files(prefix) - before:  # no step wrote an output: only the new ids' statuses and records
        assert path.startswith(new_ids) and (path in new_ids or "/.executor" in path), path
    assert not (before - _files(prefix)), "the old outputs are left as they were"
    assert "nothing to do" in _run(experiment, prefix)


def test_a_dependent_that_runs_reads_a_carried_over_output_through_its_alias(tmp_path):
    prefix = _legacy_prefix(tmp_path, without=("relocate/shout",))
    experiment = _copy(tmp_path / "lab", "exp.py")
    plan = _plan(experiment, prefix)
    assert {name: row["action"] for name, row in plan.items()} == {
        "relocate/words": "skip", "relocate/shout": "run", "relocate/quiet": "skip"}
    assert "1 ran here" in _run(experiment, prefix)
    shout = prefix / plan["relocate/shout"]["step_id"] / "shout.txt"
    assert shout.read_text() == (LEGACY_PREFIX / LEGACY_IDS["relocate/shout"] / "shout.txt").read_text()
    assert not (prefix / plan["relocate/words"]["step_id"] / "words.json").exists()  # read where it was made


def test_only_a_completed_output_is_carried_over(tmp_path):
    prefix = _legacy_prefix(tmp_path)
    status_file = prefix / LEGACY_IDS["relocate/quiet"] / ".executor/status.json"
    status = json.loads(status_file.read_text())
    status_file.write_text(json.dumps({**status, "state": "FAILED", "error": "boom"}))
    plan = _plan(_copy(tmp_path / "lab", "exp.py"), prefix)
    assert {name: row["action"] for name, row in plan.items()} == {
        "relocate/words": "skip", "relocate/shout": "skip", "relocate/quiet": "run"}


def test_the_module_of_a_file_is_still_named_for_provenance_and_results(tmp_path):
    """naming.py still names where a class lives (records' result types); ids no longer use it."""
    assert module_name_of_file(str(REPO / "experiments/hello.py")) == "experiments.hello"
    assert module_name_of_file(str(REPO / "steps/train/config.py")) == "steps.train.config"
    assert module_name_of_file(str(tmp_path / "loose.py")) == "loose"
    import collections

    assert qualified_name(collections.OrderedDict) == "collections.OrderedDict"
    plan = json.loads((REPO / "experiments/hello.plan.json").read_text())
    assert '"dataclass": "WordsConfig"' in json.dumps(plan) and "experiments.hello" not in json.dumps(
        [s["identity"] for s in plan["steps"]])


def test_steps_with_a_status_are_not_looked_up_under_their_legacy_ids(tmp_path, monkeypatch):
    """Planning a prefix whose steps all have statuses works out no legacy id (the hot path stays)."""
    from executor.core import legacy_ids
    from executor.core.graph import build_graph
    from executor.core.plan import Observed
    from executor.core.record import State, Status
    from executor.engine.run import legacy_carry
    from tests.executor.relocatable_experiment import Options, build

    graph = build_graph(build(Options()))
    snapshot = {d: Observed(Status(State.SUCCESS, d, n.step_id, 1, 1, None, 0.0)) for d, n in graph.nodes.items()}

    def refuse(self: object, digest: str) -> str:
        raise AssertionError("a legacy id was worked out for a step that has a status")

    monkeypatch.setattr(legacy_ids.LegacyDigests, "of", refuse)
    assert legacy_carry.carry_over(graph, snapshot, None, None, str(tmp_path), write=True) is snapshot
    first = next(iter(graph.nodes))
    del snapshot[first]  # one step without a status: it alone is looked up
    with pytest.raises(AssertionError, match="a legacy id was worked out"):
        legacy_carry.carry_over(graph, snapshot, None, None, str(tmp_path), write=True)


def _carry_over_twice(experiment: Path, prefix: Path, monkeypatch) -> tuple:
    """(graph, first, second): `experiment` loaded as the module `exp` (as when the prefix was written),
    then two carry-overs planned from the same snapshot, as two runners racing would."""
    from executor.core.graph import build_graph
    from executor.engine.prefix.location import open_location
    from executor.engine.run import legacy_carry
    from executor.engine.run.snapshot import read_snapshot

    spec = importlib.util.spec_from_file_location("exp", experiment)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "exp", module)
    spec.loader.exec_module(module)
    graph = build_graph(module.build(module.Options()))
    store, fs = open_location(str(prefix))
    snapshot = read_snapshot(store, graph.nodes.values())
    first = legacy_carry.carry_over(graph, snapshot, store, fs, str(prefix), write=True, now=1.0)
    second = legacy_carry.carry_over(graph, snapshot, store, fs, str(prefix), write=True, now=2.0)
    return graph, first, second


def test_two_runners_carrying_the_same_prefix_over_make_one_decision(tmp_path, monkeypatch):
    """Both planned from a snapshot without the new statuses: the second finds the first's and keeps it."""
    prefix = _legacy_prefix(tmp_path)
    experiment = _copy(tmp_path / "lab", "exp.py")  # the module `exp`, as when the prefix was written
    graph, first, second = _carry_over_twice(experiment, prefix, monkeypatch)
    assert {d: (o.status.written_at, o.generation) for d, o in first.items()} == {
        d: (o.status.written_at, o.generation) for d, o in second.items()}
    assert {o.status.written_at for o in second.values()} == {1.0}
    for digest, observed in second.items():
        status = json.loads((prefix / graph.nodes[digest].output_rel / ".executor/status.json").read_text())
        assert status["written_at"] == 1.0 and status["alias_of"]["step_id"] == LEGACY_IDS[graph.nodes[digest].name]


@dataclasses.dataclass(frozen=True)
class FixedPlaceConfig:
    text: str
    output_path: str


def write_fixed_place(config: FixedPlaceConfig) -> None:
    raise AssertionError("never run: the test only plans")


def test_an_override_path_holding_a_failed_output_of_before_is_named_as_such_not_as_an_id_collision(tmp_path):
    """An override_output_path is the same path under the old id and the new: a SUCCESS there is carried
    over in place (below); another state of the old digest is named as such, with the way on, not as "a
    48-bit id collision"; any other digest is still a clash."""
    from executor import ExecutorStep, this_output_path
    from executor.core.errors import GraphError
    from executor.core.graph import build_graph
    from executor.core.identity import step_id
    from executor.core.legacy_ids import LegacyDigests
    from executor.core.plan import Observed
    from executor.core.record import State, Status
    from executor.engine.run import legacy_carry

    step = ExecutorStep("fixed/words", write_fixed_place, FixedPlaceConfig("x", this_output_path()),
                        override_output_path="fixed/place")
    graph = build_graph([step])
    (digest, node), = graph.nodes.items()
    old = LegacyDigests(graph).of(digest)
    assert old != digest  # the config class is named by its module in the old encoding

    def held(by: str, state: State = State.SUCCESS) -> dict:
        return {digest: Observed(Status(state, by, step_id(node.name, by), 1, 1, None, 0.0))}

    with pytest.raises(GraphError, match=r"'fixed/place' holds a FAILED status of the step's id of before.*"
                                         r"repair --delete-status fixed/place"):
        legacy_carry.carry_over(graph, held(old, State.FAILED), None, None, str(tmp_path), write=False)
    dry = legacy_carry.carry_over(graph, held(old), None, None, str(tmp_path), write=False)[digest].status
    assert (dry.state, dry.digest, dry.step_id, dry.alias_of) == (State.SUCCESS, digest, node.step_id, None)
    clash = held("f" * 64)  # not the step's old digest: left to the plan's clash error
    assert legacy_carry.carry_over(graph, clash, None, None, str(tmp_path), write=False) is clash


OVERRIDE_PREFIX = REPO / "tests/executor/legacy_override_prefix"  # see legacy_override_prefix.txt


def test_override_paths_made_with_the_ids_of_before_are_carried_over_in_place_and_every_tool_accepts_them(tmp_path):
    """tests/executor/override_experiment.py ran before issue 44 (its words and shout at fixed paths): under
    today's ids nothing runs; the fixed paths' statuses and records are re-keyed in place (the files left
    as they were), quiet is adopted through an alias; `verify`, `load_result` and `lineage` (up, and down
    to quiet, whose record of before names words' old digest) accept what was written; what early cutoff
    compares (the manifest digest, the consumed inputs) is kept and re-keyed; a copy named exp_v2.py
    (another module) keeps every id."""
    prefix = tmp_path / "prefix"
    shutil.copytree(OVERRIDE_PREFIX, prefix)
    for record in prefix.rglob("record.json"):  # records name inputs by full path: where the fixture was made
        record.write_text(record.read_text().replace('"/tmp/rest4449_fx/prefix/', f'"{prefix}/'))
    lab = tmp_path / "lab"
    lab.mkdir()
    experiment = lab / "exp.py"
    experiment.write_text((REPO / "tests/executor/override_experiment.py").read_text())
    before = {p: p.read_bytes() for p in prefix.rglob("*") if p.is_file() and "/.executor/" not in str(p)}
    plan = _plan(experiment, prefix)
    assert {name: row["action"] for name, row in plan.items()} == dict.fromkeys(LEGACY_IDS, "skip"), plan
    assert "nothing to do" in _run(experiment, prefix)
    for name, rel in (("relocate/words", "fixed/words"), ("relocate/shout", "fixed/shout")):
        status = json.loads((prefix / rel / ".executor/status.json").read_text())
        record = json.loads((prefix / rel / ".executor/record.json").read_text())
        assert status["digest"] == plan[name]["digest"] and status["step_id"] == plan[name]["step_id"], status
        assert status["alias_of"] is None and status["state"] == "SUCCESS"
        assert record["digest"] == status["digest"] and record["extra"]["legacy_id"] == LEGACY_IDS[name]
    quiet = json.loads((prefix / plan["relocate/quiet"]["step_id"] / ".executor/status.json").read_text())
    assert quiet["alias_of"]["step_id"] == LEGACY_IDS["relocate/quiet"]
    assert {p: p.read_bytes() for p in before} == before, "the outputs' files are left as they were"
    assert "nothing to do" in _run(experiment, prefix)
    v2 = lab / "exp_v2.py"  # another module name: the same ids, nothing to do
    v2.write_text(experiment.read_text())
    assert "nothing to do" in _run(v2, prefix)

    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def tool(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "executor", *args, "--prefix", str(prefix)], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "0 problem" in tool("verify") or "ok" in tool("verify").lower()
    up = tool("lineage", "fixed/shout")
    assert "fixed/words" in up and "absent" not in up, up
    down = tool("lineage", "fixed/words", "--down")
    assert "fixed/shout" in down and plan["relocate/quiet"]["step_id"] in down, down
    probe = lab / "probe.py"
    probe.write_text("import sys\nsys.path.insert(0, sys.argv[2])\nimport exp\nfrom executor import load_result\n"
                     "steps = exp.build(exp.Options())\n"
                     "print(load_result(steps[0], prefix=sys.argv[1]), load_result(steps[1], prefix=sys.argv[1]))\n")
    loaded = subprocess.run([sys.executable, str(probe), str(prefix), str(lab)], env=env, cwd=lab,
                            capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and "{'shouted': 3} {'shouted': 3}" in loaded.stdout, loaded.stdout + loaded.stderr
    # what early cutoff compares is kept and re-keyed: the manifest digest, and shout's consumed inputs
    words, shout = (json.loads((prefix / rel / ".executor/status.json").read_text())
                    for rel in ("fixed/words", "fixed/shout"))
    old_words = json.loads((OVERRIDE_PREFIX / "fixed/words/.executor/status.json").read_text())
    assert words["content_sha256"] == old_words["content_sha256"]
    assert shout["inputs"] == {plan["relocate/words"]["digest"]: old_words["content_sha256"]}


def test_two_runners_carrying_an_override_path_over_make_one_decision(tmp_path, monkeypatch):
    """Both planned from the old status: the first re-keys it by CAS; the second's CAS finds the generation
    moved and takes the first's status (a plain write would put its own over it)."""

    prefix = tmp_path / "prefix"
    shutil.copytree(OVERRIDE_PREFIX, prefix)
    experiment = tmp_path / "lab" / "exp.py"
    experiment.parent.mkdir()
    experiment.write_text((REPO / "tests/executor/override_experiment.py").read_text())
    graph, first, second = _carry_over_twice(experiment, prefix, monkeypatch)
    fixed = [d for d, n in graph.nodes.items() if n.output_rel.startswith("fixed/")]
    assert len(fixed) == 2
    for digest in fixed:
        assert first[digest].generation == second[digest].generation
        status = json.loads((prefix / graph.nodes[digest].output_rel / ".executor/status.json").read_text())
        assert status["written_at"] == 1.0 and status["digest"] == digest and status["seq"] == 2


def test_cache_from_a_prefix_made_with_the_ids_of_before_copies_its_outputs_under_the_new_ids(tmp_path):
    """`--cache-from OLD` where OLD was written before issue 44: its outputs are found under their old ids,
    copied (every byte checked against the old record's manifest) and committed under the new ids with a
    record of the new id; nothing runs, and `verify` accepts what was written."""
    source = _legacy_prefix(tmp_path)
    here = tmp_path / "here"
    experiment = _copy(tmp_path / "lab", "exp.py")
    before = _files(source)
    plan = _plan(experiment, here, "--cache-from", str(source))
    # words is read by the copied steps only: not needed here (set aside, as for any --cache-from)
    assert {name: row["action"] for name, row in plan.items()} == dict.fromkeys(("relocate/shout", "relocate/quiet"),
                                                                                 "copy"), plan
    for name, row in plan.items():
        assert f"under its id of before issue 44 {LEGACY_IDS[name]}" in row["reason"], row["reason"]
    out = _run(experiment, here, "--cache-from", str(source))
    assert "0 ran here" in out or "ran here" not in out, out
    for name, row in plan.items():
        status = json.loads((here / row["step_id"] / ".executor/status.json").read_text())
        record = json.loads((here / row["step_id"] / ".executor/record.json").read_text())
        assert status["state"] == "SUCCESS" and status["copied_from"] == str(source), status
        assert record["digest"] == status["digest"] and record["step_id"] == row["step_id"]
        assert record["extra"]["legacy_id"] == LEGACY_IDS[name]
        old_files = {p.name: p.read_bytes() for p in (source / LEGACY_IDS[name]).iterdir() if p.is_file()}
        assert old_files and all((here / row["step_id"] / f).read_bytes() == b for f, b in old_files.items())
    new_ids = set(_ids(experiment, tmp_path / "empty").values())
    for row in plan.values():  # the dependencies' ids in a copied record are the new ones
        record = json.loads((here / row["step_id"] / ".executor/record.json").read_text())
        assert record["dependencies"] and {d["step_id"] for d in record["dependencies"]} <= new_ids, record
    assert _files(source) == before, "the source is only read"
    assert "nothing to do" in _run(experiment, here)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    verified = subprocess.run([sys.executable, "-m", "executor", "verify", "--prefix", str(here)], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_cache_from_refuses_an_output_tainted_under_its_id_of_before(tmp_path):
    """A taint recorded in the old prefix against an old digest refuses that output's copy (and its
    dependents run again), as a taint of the new id would."""
    from executor.engine.store import open_store
    from executor.tools.taint import taint_output

    source = _legacy_prefix(tmp_path)
    taint_output(open_store(str(source)), LEGACY_IDS["relocate/words"], "taint", "bad words", by={"user": "t"})
    plan = _plan(_copy(tmp_path / "lab", "exp.py"), tmp_path / "here", "--cache-from", str(source))
    assert plan["relocate/words"]["action"] == "run" and "tainted: bad words" in plan["relocate/words"]["reason"]
    for name in ("relocate/shout", "relocate/quiet"):
        assert plan[name]["action"] == "run" and "derived from tainted relocate/words" in plan[name]["reason"], plan
