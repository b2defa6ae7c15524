"""`python -m executor check experiments/`: the CI plan check over many experiment files.

For every experiment file with a committed `<stem>.plan.json` it runs, as subprocesses,
  1. `python <file> --check` (ids vs the committed plan; exit 3 names the changed fields), and
  2. `python -m executor plan <file>` under a different PYTHONHASHSEED, whose plan must equal
     the committed one exactly — ids that depend on hash seeds (iteration order of a set turned
     into a list, say) are caught here even when the first process happens to agree.
Exit 0 when all pass, 3 when any plan differs, 2 on usage errors (no experiments found).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from executor.tools.plan_file import plan_file_path

EXIT_OK, EXIT_USAGE, EXIT_CHANGED = 0, 2, 3
SEEDS = ("0", "4242")  # first process, second process


def experiments_with_plans(paths: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """(experiment files that have a plan file, those that do not) from files and directories."""
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


def check_one(file: Path, say: Callable[[str], None], python: str = sys.executable, timeout_s: float = 300) -> int:
    # Both processes start at once: the check against the committed file, and the recomputation.
    checking = _start([python, str(file), "--check"], SEEDS[0])
    recomputing = _start([python, "-m", "executor", "plan", str(file)], SEEDS[1])
    code, out, err = _finish(checking, timeout_s)
    second_code, second_out, second_err = _finish(recomputing, timeout_s)
    for line in (out + err).rstrip().splitlines():
        say(f"  {line}")
    if second_code != 0:
        say(f"  second process (PYTHONHASHSEED={SEEDS[1]}) could not compute the plan (exit "
            f"{second_code}): {second_err.strip()[-2000:]}")
        return EXIT_CHANGED if code in (EXIT_OK, EXIT_CHANGED) else code
    try:
        recomputed = json.loads(second_out)
    except ValueError as e:
        say(f"  second process printed no plan JSON ({e})")
        return EXIT_CHANGED
    committed = json.loads(plan_file_path(file).read_text())
    old = {s["step_id"]: s for s in committed["steps"]}
    new = {s["step_id"]: s for s in recomputed["steps"]}
    if old != new:
        only_new = sorted(set(new) - set(old))
        only_old = sorted(set(old) - set(new))
        say(f"  FAILED: the plan recomputed under PYTHONHASHSEED={SEEDS[1]} differs from the committed one "
            f"(checked under PYTHONHASHSEED={SEEDS[0]}): ids only in the second process: "
            f"{', '.join(only_new) or '-'}; only in the committed plan: {', '.join(only_old) or '-'}. "
            f"An id that depends on the hash seed comes from iterating a set or a hash-ordered "
            f"structure into a list/tuple in the config; sort it.")
        return EXIT_CHANGED
    say(f"  ids identical in a second process (PYTHONHASHSEED={SEEDS[1]})")
    return code


def check_experiments(paths: Sequence[str], say: Callable[[str], None] = print) -> int:
    with_plan, without = experiments_with_plans(paths)
    if not with_plan:
        say(f"error: no experiment file with a .plan.json found in {', '.join(paths)}; "
            f"create one with `python experiments/<name>.py --update-plan`")
        return EXIT_USAGE
    results = {}
    for file in with_plan:
        say(f"{file}:")
        results[file] = check_one(file, say)
    for file in without:
        say(f"{file}: no {plan_file_path(file).name}; not checked")
    failed = [f for f, code in results.items() if code != EXIT_OK]
    if failed:
        say(f"plan check failed for {len(failed)} of {len(results)} experiment(s): {', '.join(map(str, failed))}")
        return EXIT_CHANGED if any(results[f] == EXIT_CHANGED for f in failed) else EXIT_USAGE
    say(f"plan check ok for {len(results)} experiment(s)")
    return EXIT_OK
