"""Every exit code stepgraph returns, in one enum: the command line, experiment files and tools use it.

The signal codes follow the shell's convention, 128 + the signal's number. `stepgraph --help` lists
them all (`help_text()`); tests/executor/test_exit_codes.py holds the values and that no other
module defines exit-code constants of its own.
"""

from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a step failed or the runner broke; a tool found problems (status, verify, doctor)
    USAGE = 2  # usage or config error: nothing ran
    CHANGED = 3  # `check` / `--check`: ids differ from the committed ids file (<stem>.plan.json)
    INTERRUPTED = 128 + signal.SIGINT  # 130: Ctrl-C
    BROKEN_PIPE = 128 + signal.SIGPIPE  # 141: the reader of stdout went away (`stepgraph status | head`)
    TERMINATED = 128 + signal.SIGTERM  # 143: SIGTERM (Kubernetes, SLURM, `ray job stop`, preemption)


MEANINGS = {
    ExitCode.OK: "all done",
    ExitCode.FAILED: "steps failed or the runner broke; status (a step FAILED or CORRUPT), verify, "
                     "doctor: problems found; gc: a deletion refused",
    ExitCode.USAGE: "usage or config error (nothing ran)",
    ExitCode.CHANGED: "check/--check: step ids changed against the committed ids file",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.BROKEN_PIPE: "the reader of the output went away (| head)",
    ExitCode.TERMINATED: "terminated (SIGTERM)",
}


def for_signal(signum: int) -> int:
    """128 + the signal's number: an ExitCode for the signals stepgraph handles, else a plain int."""
    code = 128 + int(signum)
    try:
        return ExitCode(code)
    except ValueError:  # a signal stepgraph does not handle
        return code


def help_text() -> str:
    """The exit codes and their meanings, one per line, for --help."""
    return "\n".join(f"  {int(code):>3}  {MEANINGS[code]}" for code in ExitCode)
