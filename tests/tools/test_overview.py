"""The `runs` table's command column (issue 35): the experiment relative to its project, every flag
kept, the middle of the path cut when a line must be shorter."""

from __future__ import annotations

from pathlib import Path

from executor.engine.prefix.prefix_view import RunRow
from executor.tools.overview import command_text, cut_middle, experiment_label

REPO = Path(__file__).resolve().parents[2]


def run_row(argv: list[str], cwd: str | None) -> RunRow:
    return RunRow("runs/hello-1.json", "/p/runs/hello-1.json", user="ann", host="vm", cwd=cwd, argv=tuple(argv))


def test_the_experiment_is_shown_relative_to_its_project_wherever_it_was_run_from():
    here = str(REPO / "experiments" / "hello.py")
    assert experiment_label(run_row([here, "--greeting", "Howdy"], "/somewhere/else")) == "experiments/hello.py"
    assert experiment_label(run_row(["experiments/hello.py"], str(REPO))) == "experiments/hello.py"
    gone = "/nowhere/" + "x" * 150 + "/exp/hello.py"  # a project not on this machine: relative to the run's cwd
    assert experiment_label(run_row([gone], "/nowhere/" + "x" * 150)) == "exp/hello.py"
    assert experiment_label(run_row([gone], "/elsewhere")) == "hello.py"  # else the file name


def test_a_narrow_line_cuts_the_middle_of_the_path_and_never_a_flag():
    long_dir = "/".join(["folder"] * 20)
    run = run_row([f"/nowhere/{long_dir}/hello.py", "--greeting", "Howdy"], "/nowhere")
    wide = command_text(run)
    assert wide == f"ann@vm: {long_dir}/hello.py --greeting Howdy"
    narrow = command_text(run, 60)
    assert len(narrow) == 60 and narrow.startswith("ann@vm: folder/")
    assert narrow.endswith("/hello.py --greeting Howdy") and "…" in narrow
    tiny = command_text(run, 10)  # narrower than the flags: the flags stay whole, the path keeps 24 characters
    assert tiny.endswith("hello.py --greeting Howdy") and len(tiny) == len("ann@vm: ") + 24 + len(" --greeting Howdy")
    short = run_row(["/nowhere/exp/hello.py", "--greeting", "Howdy"], "/nowhere")
    assert command_text(short, 10) == "ann@vm: exp/hello.py --greeting Howdy"  # short paths are never cut


def test_cut_middle_keeps_the_start_and_the_file_name():
    assert cut_middle("short.py", 20) == "short.py"
    cut = cut_middle("a/b/c/d/e/f/g/h/i/j/k/l/m/n/file.py", 20)
    assert len(cut) == 20 and cut.startswith("a/b/") and cut.endswith("file.py") and "…" in cut
