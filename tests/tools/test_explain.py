"""--explain and the dry run's 'what changed' lines: structural diffs collapsed to their root cause."""

from __future__ import annotations

import json
from pathlib import Path

from executor.engine.prefix import outputs
from executor.tools.identity_diff import DependencyChange, FieldChange, diff_documents, render_value

from .toy import run_file, run_main


def _doc(vocab, lr=0.1, dep="a" * 64, extra=None):
    fields = {"tokenizer": {"dataclass": "m.Tok", "fields": {"vocab_size": vocab}},
              "lr": {"float": repr(lr)}, "shape": {"tuple": [1, 2]},
              "input": {"dependency": dep, "sub": "x.json"}, "tags": {"dict": extra or {"k": "v"}}}
    return {"schema": 1, "name": "s", "code_version": None, "config": {"dataclass": "m.C", "fields": fields}}


def test_diff_names_readable_paths_and_values():
    changes = diff_documents(_doc(4096), _doc(8192, lr=0.2, extra={"k": "w", "new": 1}))
    rendered = [c.render() for c in changes]
    assert "config.tokenizer.vocab_size: 4096 -> 8192" in rendered
    assert "config.lr: 0.1 -> 0.2" in rendered
    assert "config.tags['k']: 'v' -> 'w'" in rendered
    assert "config.tags['new']: <absent> -> 1" in rendered
    assert all(isinstance(c, FieldChange) for c in changes)


def test_diff_reports_dependency_digests_separately():
    changes = diff_documents(_doc(1, dep="a" * 64), _doc(1, dep="b" * 64))
    assert changes == [DependencyChange("config.input", "a" * 64, "b" * 64, "x.json")]
    assert changes[0].render("tokenized/x") == "dependency tokenized/x (config.input): aaaaaaaaaaaa… -> bbbbbbbbbbbb…"
    assert diff_documents(_doc(1), _doc(1)) == []
    assert render_value({"tuple": [1]}) == "(1,)" and render_value({"float": "inf"}) == "inf"


def test_explain_follows_dependencies_to_the_root_cause(ran_toy):
    ran_toy.write(VOCAB="8192")
    code, out = ran_toy.run("--explain", "toy/report")
    assert code == 0, out
    lines = out.splitlines()
    assert any(line.strip().startswith("dependency toy/train (config.model_path):") for line in lines)
    assert any(line.strip().startswith("dependency toy/tokenize (config.tokens_path):") for line in lines)
    assert "config.tokenizer.vocab_size: 4096 -> 8192" in out
    assert "3 steps re-addressed by 1 change in toy/tokenize: config.tokenizer.vocab_size" in out
    # the root cause is indented deepest: it was reached through two dependencies
    root = next(line for line in lines if "vocab_size: 4096" in line)
    train = next(line for line in lines if "dependency toy/train" in line)
    assert len(root) - len(root.lstrip()) > len(train) - len(train.lstrip())


def test_explain_an_unchanged_step_and_an_unknown_one(ran_toy):
    code, out = ran_toy.run("--explain", "toy/raw")
    assert code == 0 and "is unchanged" in out
    code, out = ran_toy.run("--explain", "toy/nope")
    assert code == 2 and "matches no step" in out and "toy/report" in out


def test_explain_uses_the_committed_plan_file_without_storage(toy):
    toy.run("--update-plan", prefix=False)
    toy.write(LR="0.01")
    code, out = toy.run("--explain", "toy/report")
    assert code == 0, out
    assert "(ids file)" in out and "config.learning_rate: 0.001 -> 0.01" in out
    assert "2 steps re-addressed by 1 change in toy/train: config.learning_rate" in out


def test_dry_run_says_what_changed_for_each_new_step(ran_toy):
    ran_toy.write(VOCAB="8192")
    code, out = ran_toy.run("--dry-run")
    assert code == 0, out
    notes = out.split("what changed since the nearest earlier version:")[1]
    assert "toy/tokenize: vs toy/tokenize-" in notes and "config.tokenizer.vocab_size: 4096 -> 8192" in notes
    report_line = next(line for line in notes.splitlines() if line.strip().startswith("toy/report:"))
    assert "in toy/tokenize: config.tokenizer.vocab_size: 4096 -> 8192" in report_line
    assert "through dependency toy/train" in report_line
    assert "toy/raw:" not in notes  # skipped steps get no line


# -- a diamond, explained in-process: shared dependencies are explained once -----------------------
from dataclasses import dataclass  # noqa: E402

from executor import ExecutorStep, output_path_of, this_output_path  # noqa: E402
from executor.tools.explain import EarlierVersions, Version, explain_node, render_explanation  # noqa: E402
from executor.core.graph import build_graph  # noqa: E402
from executor.tools.identity_diff import cascade_summary  # noqa: E402


@dataclass(frozen=True)
class Cfg:
    value: int
    inputs: tuple
    output_path: object


def step_fn(config: Cfg) -> None:
    pass


def _diamond(root_value: int):
    root = ExecutorStep("d/root", step_fn, Cfg(root_value, (), this_output_path()))
    left = ExecutorStep("d/left", step_fn, Cfg(1, (output_path_of(root),), this_output_path()))
    right = ExecutorStep("d/right", step_fn, Cfg(2, (output_path_of(root),), this_output_path()))
    join = ExecutorStep("d/join", step_fn, Cfg(3, (output_path_of(left), output_path_of(right)), this_output_path()))
    return build_graph([join])


def test_a_diamond_cascade_is_collapsed_to_one_root_cause():
    old, new = _diamond(1), _diamond(2)
    versions = EarlierVersions(Version(n.name, n.step_id, n.digest, n.identity, "ids file") for n in old.nodes.values())
    join = new.node_by_name("d/join")[0]
    explanation = explain_node(new, join, versions.nearest(join), versions)
    assert explanation.readdressed() == {n.step_id for n in new.nodes.values()}
    assert explanation.roots() == [("d/root", ["config.value"])]
    assert cascade_summary(len(explanation.readdressed()), explanation.roots()) == \
        "4 steps re-addressed by 1 change in d/root: config.value"
    lines = render_explanation(new, explanation)
    assert sum("config.value: 1 -> 2" in line for line in lines) == 1
    assert any(line.endswith("(explained above)") for line in lines)
    assert any("dependency d/left (config.inputs[0])" in line for line in lines)


def test_explain_and_the_tools_read_an_object_store_prefix_with_the_runs_storage_options(
        ran_toy, s3_emulator, monkeypatch):
    """EXECUTOR_STORAGE_OPTIONS reaches --explain and `python -m executor` (no flag needed)."""
    prefix = s3_emulator.fresh_prefix("explain")
    options = dict(s3_emulator.storage_options)
    fs = outputs.filesystem(prefix, options)
    for local in Path(ran_toy.prefix).rglob("*"):  # the completed toy outputs, as if run on S3
        if local.is_file():
            fs.pipe_file(f"{prefix}/{local.relative_to(ran_toy.prefix).as_posix()}", local.read_bytes())
    (raw_dir,) = (p.name for p in Path(ran_toy.prefix, "toy").iterdir() if p.name.startswith("raw-"))
    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", json.dumps(options))

    ran_toy.write(VOCAB="8192")
    code, out = run_file(ran_toy.path, "--explain", "toy/report", "--prefix", prefix)
    assert code == 0, out
    assert "config.tokenizer.vocab_size: 4096 -> 8192" in out and "(ids file)" not in out

    code, out = run_main("status", f"{prefix}/toy/{raw_dir}")
    assert code == 0 and f"toy/{raw_dir}  SUCCESS" in out, out

    monkeypatch.setenv("EXECUTOR_STORAGE_OPTIONS", "[1]")
    code, out = run_main("status", f"{prefix}/toy/{raw_dir}")
    assert code == 2 and "EXECUTOR_STORAGE_OPTIONS must be a JSON object" in out, out
