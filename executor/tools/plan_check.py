"""`python -m executor check experiments/`: the CI check of step ids over many experiment files.

For every experiment file with a committed ids file (`<stem>.plan.json`) it runs, as subprocesses,
  1. `python <file> --check` (ids vs the committed ids file; exit 3 names the changed fields), and
  2. `python -m executor ids <file>` under the first seed and under a different PYTHONHASHSEED:
     the two recomputed id lists must be equal — ids that depend on hash seeds (iteration order of a
     set turned into a list, say) are caught here. The second process is compared with the first,
     never with the committed file, so an intended change reported by (1) raises no seed alarm.
Exit 0 when all pass, 3 when any id differs, 2 on usage errors (no experiments found).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from executor.core.exit_codes import ExitCode
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


def _ids_of(code: int, out: str, err: str, seed: str, say: Callable[[str], None]) -> dict | None:
    if code != 0:
        say(f"  process with PYTHONHASHSEED={seed} could not compute the ids (exit {code}): {err.strip()[-2000:]}")
        return None
    try:
        return {s["step_id"]: s for s in json.loads(out)["steps"]}
    except (ValueError, KeyError, TypeError) as e:
        say(f"  process with PYTHONHASHSEED={seed} printed no ids JSON ({e})")
        return None


def check_one(file: Path, say: Callable[[str], None], python: str = sys.executable, timeout_s: float = 300) -> int:
    # All at once: the check against the committed file, and the ids recomputed under two seeds.
    checking = _start([python, str(file), "--check"], SEEDS[0])
    first = _start([python, "-m", "executor", "ids", str(file)], SEEDS[0])
    second = _start([python, "-m", "executor", "ids", str(file)], SEEDS[1])
    code, out, err = _finish(checking, timeout_s)
    plans = [_ids_of(*_finish(process, timeout_s), seed, say) for process, seed in ((first, SEEDS[0]),
                                                                                      (second, SEEDS[1]))]
    for line in (out + err).rstrip().splitlines():
        say(f"  {line}")
    if plans[0] is None or plans[1] is None:
        return ExitCode.CHANGED if code in (ExitCode.OK, ExitCode.CHANGED) else code
    if plans[0] != plans[1]:
        only_second = sorted(set(plans[1]) - set(plans[0]))
        only_first = sorted(set(plans[0]) - set(plans[1]))
        say(f"  FAILED: the step ids differ between PYTHONHASHSEED={SEEDS[0]} and PYTHONHASHSEED={SEEDS[1]}: "
            f"ids only under {SEEDS[1]}: {', '.join(only_second) or '-'}; only under {SEEDS[0]}: "
            f"{', '.join(only_first) or '-'}. An id that depends on the hash seed comes from iterating a set "
            f"or a hash-ordered structure into a list/tuple in the config; sort it.")
        return ExitCode.CHANGED
    say(f"  ids identical in a second process (PYTHONHASHSEED={SEEDS[1]})")
    return code


def check_experiments(paths: Sequence[str], say: Callable[[str], None] = print) -> int:
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        say(f"error: {', '.join(missing)}: no such file or directory")
        return ExitCode.USAGE
    with_plan, without = experiments_with_plans(paths)
    if not with_plan:
        say(f"error: no experiment file with an ids file (<stem>.plan.json) found in {', '.join(paths)}; "
            f"create one with `python experiments/<name>.py --update-plan`")
        return ExitCode.USAGE
    results = {}
    for file in with_plan:
        say(f"{file}:")
        results[file] = check_one(file, say)
    for file in without:
        say(f"{file}: no {plan_file_path(file).name}; not checked")
    failed = [f for f, code in results.items() if code != ExitCode.OK]
    if failed:
        say(f"ids check failed for {len(failed)} of {len(results)} experiment(s): {', '.join(map(str, failed))}")
        return ExitCode.CHANGED if any(results[f] == ExitCode.CHANGED for f in failed) else ExitCode.USAGE
    say(f"ids check ok for {len(results)} experiment(s)")
    return ExitCode.OK
