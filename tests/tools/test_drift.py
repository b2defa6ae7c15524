"""Drift: completed outputs whose step's code (the code it reaches) changed since they were produced.

Real runs (`stepgraph run ... --runner inline`) of a small experiment in a tmp dir: acc/raw and
acc/upper call `write_text` (same file); acc/upper also calls `helpers.transform` (another module of
the experiment's folder), which reads the constant `helpers.SUFFIX`; acc/count reaches neither.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .toy import run_main

EXPERIMENT = '''\
"""acc: raw -> upper, raw -> count."""
from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, executor_main, output_path_of, this_output_path
from helpers import transform


@dataclass(frozen=True)
class MakeConfig:
    text: str
    output_path: str


@dataclass(frozen=True)
class ReadConfig:
    input_path: str
    output_path: str


def write_text(path, text):
    Path(path).write_text(text)


def make(config: MakeConfig):
    """Write the text."""
    write_text(Path(config.output_path, "out.txt"), config.text)


def upper(config: ReadConfig):
    write_text(Path(config.output_path, "out.txt"), transform(Path(config.input_path).read_text()))


def count(config: ReadConfig):
    Path(config.output_path, "n.txt").write_text(str(len(Path(config.input_path).read_text())))


raw = ExecutorStep("acc/raw", make, MakeConfig("hello", this_output_path()))
up = ExecutorStep("acc/upper", upper, ReadConfig(output_path_of(raw, "out.txt"), this_output_path()))
n = ExecutorStep("acc/count", count, ReadConfig(output_path_of(raw, "out.txt"), this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[up, n], description="acc"POLICY)
'''

HELPERS = '''\
SUFFIX = "!"


def transform(text):
    return text.upper() + SUFFIX
'''


class Acc:
    """The experiment and its helper module in a tmp dir, with a prefix of its own."""

    def __init__(self, directory: Path, policy: str = ""):
        self.dir = directory
        self.path, self.helpers = directory / "acc.py", directory / "helpers.py"
        self.prefix = str(directory / "prefix")
        self.path.write_text(EXPERIMENT.replace("POLICY", policy))
        self.helpers.write_text(HELPERS)

    def edit(self, file: Path, old: str, new: str) -> None:
        text = file.read_text()
        assert old in text, old
        file.write_text(text.replace(old, new))

    def run(self, *flags: str) -> tuple[int, str]:
        sys.modules.pop("helpers", None)  # as a new `python acc.py` would import it
        try:
            code, out = run_main("run", "--prefix", self.prefix, str(self.path), *flags)
        finally:
            sys.modules.pop("helpers", None)
        return code, " ".join(out.split())

    def main(self, *argv: str) -> tuple[int, str]:
        sys.modules.pop("helpers", None)
        try:
            code, out = run_main(*argv, "--prefix", self.prefix)
        finally:
            sys.modules.pop("helpers", None)
        return code, " ".join(out.split())

    def record(self, name: str) -> dict:
        [path] = Path(self.prefix).glob(f"{name}-*/.executor/record.json")
        return json.loads(path.read_text())


@pytest.fixture
def acc(tmp_path) -> Acc:
    exp = Acc(tmp_path)
    code, out = exp.run("--runner", "inline")
    assert code == 0, out
    return exp


def drifted(out: str) -> dict[str, str]:
    """{step: what changed} of every drift warning in a run's output."""
    found = {}
    for part in out.split("warning: ")[1:]:
        step, _, rest = part.partition(": ")
        found[step] = rest.split(" changed since ")[0]
    return found


@pytest.fixture
def records_read(monkeypatch) -> list[str]:
    """The records the drift check reads (statuses answer when nothing changed)."""
    from executor.tools import drift

    read: list[str] = []
    real = drift.outputs.read_record
    monkeypatch.setattr(drift.outputs, "read_record", lambda fs, path: read.append(path) or real(fs, path))
    return read


def test_no_warning_and_no_record_read_when_the_code_is_unchanged(acc, records_read):
    code, out = acc.run("--dry-run")
    assert code == 0 and "changed since" not in out
    assert records_read == []  # the statuses' digests answered
    acc.edit(acc.helpers, "text.upper()", "text.lower()")
    code, out = acc.run("--dry-run")
    assert code == 0 and len(records_read) == 1 and "acc/upper-" in records_read[0]


def test_a_helper_in_the_same_file_is_named_for_exactly_the_steps_that_reach_it(acc):
    acc.edit(acc.path, "Path(path).write_text(text)", "Path(path).write_text(text.strip())")
    code, out = acc.run("--dry-run")
    assert code == 0, out
    assert drifted(out) == {"acc/raw": "acc.write_text", "acc/upper": "acc.write_text"}
    assert "changed since acc/upper-" in out and "accept-drift EXPERIMENT acc/upper --reason" in out
    code, out = acc.run("--runner", "inline")  # everything skips, and a real run says so too
    assert code == 0 and "nothing to do" in out and set(drifted(out)) == {"acc/raw", "acc/upper"}


def test_a_helper_in_another_module_and_a_constant_it_reads_are_named(acc):
    acc.edit(acc.helpers, "text.upper()", "text.title()")
    code, out = acc.run("--dry-run")
    assert code == 0 and drifted(out) == {"acc/upper": "helpers.transform"}, out
    acc.edit(acc.helpers, "text.title()", "text.upper()")  # back as it was: silent again
    acc.edit(acc.helpers, 'SUFFIX = "!"', 'SUFFIX = "?"')
    code, out = acc.run("--dry-run")
    assert code == 0 and drifted(out) == {"acc/upper": "helpers.SUFFIX"}, out


@pytest.mark.parametrize("file, old, new", [
    ("path", "def write_text(path, text):\n", "def write_text(path, text):\n    # a comment line\n"),
    ("path", '"""Write the text."""', '"""Write the text, a docstring reworded."""'),
    ("path", "    write_text(Path(config.output_path, \"out.txt\"), transform(Path(config.input_path).read_text()))",
     "    write_text(\n        Path(config.output_path, 'out.txt'),\n\n        transform(Path(config.input_path).read_text()),\n    )"),
    ("helpers", "def transform(text):\n", "def transform(text):\n    \"\"\"A new docstring.\"\"\"  # and a comment\n"),
])
def test_comment_docstring_and_layout_edits_say_nothing_and_run_nothing(acc, file, old, new):
    acc.edit(getattr(acc, file), old, new)
    code, out = acc.run("--dry-run", "--drift", "strict")
    assert code == 0 and "changed since" not in out and "code changed" not in out, out
    code, out = acc.run("--runner", "inline", "--drift=strict")
    assert code == 0 and "nothing to do" in out and "changed since" not in out, out


def test_accepting_a_drift_silences_it_and_is_recorded(acc):
    acc.edit(acc.helpers, "text.upper()", "text.upper().strip()")
    code, out = acc.main("accept-drift", str(acc.path), "acc/upper", "--reason", "the inputs have no spaces")
    assert code == 0 and "accepted: acc/upper: helpers.transform does not change its output" in out, out
    [file] = Path(acc.prefix).glob("acc/upper-*/.executor/drift-accepted/*.json")
    document = json.loads(file.read_text())
    assert document["reason"] == "the inputs have no spaces" and document["changed"] == "helpers.transform"
    assert document["accepted_by"]["user"] and document["accepted_by"]["host"] and document["accepted_at"] > 0
    assert document["recorded"] == acc.record("acc/upper")["provenance"]["code_fingerprint"]
    assert file.stem == document["accepted"]  # the fingerprint accepted names the file
    code, out = acc.run("--dry-run", "--drift", "strict")
    assert code == 0 and "changed since" not in out and "code changed" not in out, out
    code, out = acc.main("accept-drift", str(acc.path), "acc/upper", "--reason", "again")
    assert code == 2 and "accepted already" in out, out
    acc.edit(acc.helpers, "text.upper().strip()", "text.upper().strip().lower()")  # another edit warns again
    code, out = acc.run("--dry-run")
    assert drifted(out) == {"acc/upper": "helpers.transform"}, out
    code, out = acc.main("accept-drift", str(acc.path), "acc/count", "--reason", "nothing")
    assert code == 2 and "acc/count: its code is unchanged" in out, out


def test_strict_reruns_exactly_the_drifted_steps(acc):
    acc.edit(acc.helpers, "text.upper()", "text.lower()")
    code, out = acc.run("--dry-run", "--drift", "strict")
    assert code == 0 and "code changed: helpers.transform" in out and "changed since" not in out, out
    before = {name: acc.record(name)["attempt"] for name in ("acc/raw", "acc/upper", "acc/count")}
    code, out = acc.run("--runner", "inline", "--drift=strict")
    assert code == 0, out
    after = {name: acc.record(name)["attempt"] for name in before}
    assert after == {**before, "acc/upper": before["acc/upper"] + 1}  # a new attempt at the same id, only there
    assert (next(Path(acc.prefix).glob("acc/upper-*")) / "out.txt").read_text() == "hello!"  # the edited code ran
    code, out = acc.run("--dry-run", "--drift", "strict")
    assert code == 0 and "code changed" not in out and "changed since" not in out, out


def test_the_experiment_can_choose_strict_and_the_flag_overrides_it(tmp_path):
    exp = Acc(tmp_path, policy=', drift="strict"')
    assert exp.run("--runner", "inline")[0] == 0
    exp.edit(exp.path, "Path(path).write_text(text)", "Path(path).write_text(text + '')")
    code, out = exp.run("--dry-run")
    assert code == 0 and out.count("code changed: acc.write_text") == 2, out
    code, out = exp.run("--dry-run", "--drift", "warn")
    assert code == 0 and "code changed" not in out and set(drifted(out)) == {"acc/raw", "acc/upper"}, out
    code, out = exp.run("--dry-run", "--drift", "sometimes")
    assert code == 2 and "warn" in out and "strict" in out, out


def test_an_old_record_is_compared_by_its_function_source_and_never_crashes(acc, records_read):
    """A record from before fingerprints has only the sha256 of the step function's source."""
    for name in ("acc/raw", "acc/upper", "acc/count"):
        [folder] = Path(acc.prefix).glob(f"{name}-*/.executor")
        record = json.loads((folder / "record.json").read_text())
        del record["provenance"]["code_fingerprint"]
        (folder / "record.json").write_text(json.dumps(record))
        status = json.loads((folder / "status.json").read_text())
        # as old statuses held: the source's sha256 (acc/raw's, from before statuses held it: none)
        status["function_sha256"] = record["provenance"]["function_sha256"] if name != "acc/raw" else None
        (folder / "status.json").write_text(json.dumps(status))
    acc.edit(acc.helpers, "text.upper()", "text.lower()")  # not comparable for an old record: silent
    code, out = acc.run("--dry-run")
    assert code == 0 and "changed since" not in out, out
    assert [p.split("/")[-3].rsplit("-", 1)[0] for p in records_read] == ["raw"]  # the others: their statuses
    acc.edit(acc.path, "str(len(", "str(2 * len(")
    code, out = acc.run("--dry-run")
    assert code == 0 and drifted(out) == {"acc/count": "acc.count"}, out
    assert "predates code fingerprints" in out
    code, out = acc.main("accept-drift", str(acc.path), "acc/count", "--reason", "doubling is cosmetic here")
    assert code == 0, out
    code, out = acc.run("--dry-run")
    assert code == 0 and "changed since" not in out, out


def test_moving_an_unchanged_helper_to_another_module_is_no_drift(acc):
    (acc.dir / "tools.py").write_text(HELPERS)
    acc.edit(acc.path, "from helpers import transform", "from tools import transform")
    sys.modules.pop("tools", None)
    try:
        code, out = acc.run("--dry-run")
    finally:
        sys.modules.pop("tools", None)
    assert code == 0 and "changed since" not in out, out
