"""`python -m executor check experiments/`: the CI check of step ids over many experiment files.

For every experiment file with a committed ids file (`<stem>.plan.json`) it runs, as subprocesses,
  1. `python <file> --check` (ids vs the committed ids file; exit 3 names the changed fields), and
  2. `python -m executor ids <file>` under the first seed and under a different PYTHONHASHSEED:
     the two recomputed id lists must be equal — ids that depend on hash seeds (iteration order of a
     set turned into a list, say) are caught here. The second process is compared with the first,
     never with the committed file, so an intended change reported by (1) raises no seed alarm.
Exit 0 when all pass, 3 when any id differs, 2 on usage errors (no experiments found). The library
returns what it found (`ChecksResult`) and reports it as events (ExperimentChecked per file,
ExperimentsChecked at the end); only the command line prints them (executor/tools/console_view.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from executor.core.exit_codes import ExitCode
from executor.engine.events import Events, ExperimentChecked, ExperimentsChecked, Subscriber
from executor.tools.plan_file import plan_file_path

SEEDS = ("0", "4242")  # first process, second process


def experiments_with_plans(paths: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """(experiment files that have an ids file, those that do not) from files and directories."""
    with_plan, without = [], []
    for raw in paths:
        path = Path(raw)
        files = sorted(path.glob("*.py")) if path.is_dir() else [path]
        for file in files:
            if file.name.startswith("_"):
                continue
            (with_plan if plan_file_path(file).exists() else without).append(file)
    return with_plan, without


def _start(args: list[str], seed: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout_s: float) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        return 124, out, err + f"\ntimed out after {timeout_s:.0f}s"
    return process.returncode, out, err


def _ids_of(code: int, out: str, err: str, seed: str, said: list[str]) -> dict | None:
    if code != 0:
        said.append(f"process with PYTHONHASHSEED={seed} could not compute the ids (exit {code}): "
                    f"{err.strip()[-2000:]}")
        return None
    try:
        return {s["step_id"]: s for s in json.loads(out)["steps"]}
    except (ValueError, KeyError, TypeError) as e:
        said.append(f"process with PYTHONHASHSEED={seed} printed no ids JSON ({e})")
        return None


def check_one(file: Path, python: str = sys.executable, timeout_s: float = 300) -> ExperimentChecked:
    """One experiment file checked: its exit code and what its processes said (plain lines)."""
    # All at once: the check against the committed file, and the ids recomputed under two seeds.
    checking = _start([python, str(file), "--check"], SEEDS[0])
    first = _start([python, "-m", "executor", "ids", str(file)], SEEDS[0])
    second = _start([python, "-m", "executor", "ids", str(file)], SEEDS[1])
    code, out, err = _finish(checking, timeout_s)
    seeds_said: list[str] = []
    plans = [_ids_of(*_finish(process, timeout_s), seed, seeds_said) for process, seed in ((first, SEEDS[0]),
                                                                                             (second, SEEDS[1]))]
    said = [*(out + err).rstrip().splitlines(), *seeds_said]
    if plans[0] is None or plans[1] is None:
        return _checked(file, ExitCode.CHANGED if code in (ExitCode.OK, ExitCode.CHANGED) else code, said)
    if plans[0] != plans[1]:
        only_second = sorted(set(plans[1]) - set(plans[0]))
        only_first = sorted(set(plans[0]) - set(plans[1]))
        said.append(f"FAILED: the step ids differ between PYTHONHASHSEED={SEEDS[0]} and PYTHONHASHSEED={SEEDS[1]}: "
                    f"ids only under {SEEDS[1]}: {', '.join(only_second) or '-'}; only under {SEEDS[0]}: "
                    f"{', '.join(only_first) or '-'}. An id that depends on the hash seed comes from iterating a set "
                    f"or a hash-ordered structure into a list/tuple in the config; sort it.")
        return _checked(file, ExitCode.CHANGED, said)
    said.append(f"ids identical in a second process (PYTHONHASHSEED={SEEDS[1]})")
    return _checked(file, code, said)


def _checked(file: Path, code: int, said: list[str]) -> ExperimentChecked:
    return ExperimentChecked(str(file), int(code), tuple(said), plan_file_path(file).name)


@dataclass(frozen=True)
class ChecksResult:
    """What `check_experiments` found: each experiment file (checked or not, in the order reported),
    the exit code, and the usage error that stopped it, if one did."""

    experiments: tuple[ExperimentChecked, ...]
    exit_code: int
    error: str | None = None


def check_experiments(paths: Sequence[str], subscribers: Iterable[Subscriber] = ()) -> ChecksResult:
    """Check every experiment file with an ids file under `paths`; an ExperimentChecked event per file
    and ExperimentsChecked at the end go to `subscribers` (the command line renders them: nothing is
    printed here), a usage error as an error LogLine. Returns what was found."""
    events = Events(subscribers)
    missing = [p for p in paths if not Path(p).exists()]
    with_plan, without = experiments_with_plans(paths) if not missing else ([], [])
    error = (f"{', '.join(missing)}: no such file or directory" if missing else
             None if with_plan else f"no experiment file with an ids file (<stem>.plan.json) found in "
                                    f"{', '.join(paths)}; create one with `python experiments/<name>.py --update-plan`")
    if error:
        events.error(error)
        return ChecksResult((), ExitCode.USAGE, error)
    found = []
    for file in with_plan:
        found.append(check_one(file))
        events.emit(found[-1])
    for file in without:
        found.append(ExperimentChecked(str(file), None, (), plan_file_path(file).name))
        events.emit(found[-1])
    failed = [e for e in found if not e.ok]
    events.emit(ExperimentsChecked(len(with_plan), tuple(e.file for e in failed)))
    if failed:
        code = ExitCode.CHANGED if any(e.exit_code == ExitCode.CHANGED for e in failed) else ExitCode.USAGE
        return ChecksResult(tuple(found), code)
    return ChecksResult(tuple(found), ExitCode.OK)
