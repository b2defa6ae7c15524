"""The end of each `stepgraph COMMAND --help`: examples and the exit codes that command returns.

Kept apart from the parser so every command's help has the same shape; tests parse each example
with the real parser (tests/tools/test_command_help.py), so an example cannot name a flag that
does not exist.
"""

from __future__ import annotations

from executor.core.exit_codes import ExitCode

EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": ("stepgraph run experiments/hello.py --dry-run",
            "stepgraph run experiments/hello.py --greeting Howdy --prefix gs://bucket/runs"),
    "status": ("stepgraph status", "stepgraph status experiments/hello.py -- --greeting Hi",
               "stepgraph status hello/shout --json"),
    "runs": ("stepgraph runs --limit 5", "stepgraph runs --json --limit 0"),
    "ps": ("stepgraph ps --prefix gs://bucket/runs",),
    "explain": ("stepgraph explain experiments/hello.py hello/summary",),
    "graph": ("stepgraph graph experiments/hello.py plan.html", "stepgraph graph experiments/hello.py plan.png"),
    "ids": ("stepgraph ids experiments/hello.py", "stepgraph ids experiments/hello.py -- --greeting Hi"),
    "check": ("stepgraph check experiments/", "stepgraph check experiments/hello.py"),
    "adopt": ("stepgraph adopt experiments/hello.py hello/count --from hello/count-96d5fcec79dc "
              "--reason 'renamed a field' --dry-run",),
    "accept-drift": ("stepgraph accept-drift experiments/hello.py hello/shout --reason 'a log line, not the output'",),
    "tag": ("stepgraph tag hello/count counts@2026.12",
            "stepgraph tag hello/count counts@2026.12 --force --reason 'the fixed corpus'"),
    "tags": ("stepgraph tags", "stepgraph tags --json"),
    "lineage": ("stepgraph lineage hello/summary", "stepgraph lineage hello/words --down --json"),
    "taint": ("stepgraph taint hello/words --reason 'the input leaked a benchmark'",),
    "untaint": ("stepgraph untaint hello/words --reason 'false alarm'",),
    "verify": ("stepgraph verify", "stepgraph verify hello/count -v"),
    "gc": ("stepgraph gc experiments/hello.py experiments/tiny_moe.py",
           "stepgraph gc experiments/hello.py --delete --grace-hours 48 -- --greeting Hi"),
    "repair": ("stepgraph repair --delete-status hello/shout",),
    "report": ("stepgraph report", "stepgraph report hello-20260101T000000Z-1a2b3c"),
    "serve": ("stepgraph serve --port 0", "stepgraph serve --host 0.0.0.0 --token-file ~/.stepgraph-token"),
    "doctor": ("stepgraph doctor", "stepgraph doctor --prefix s3://bucket/runs --ray-address auto"),
    "completion": ('eval "$(stepgraph completion bash)"',),
}

_USAGE = (ExitCode.USAGE, "usage error, or no stepgraph outputs under the prefix")
CODES: dict[str, tuple[tuple[ExitCode, str], ...]] = {
    "run": ((ExitCode.OK, "all done"), (ExitCode.FAILED, "a step failed or the runner broke"),
            (ExitCode.USAGE, "usage or config error (nothing ran)"), (ExitCode.CHANGED, "--check: ids changed"),
            (ExitCode.INTERRUPTED, "Ctrl-C"), (ExitCode.TERMINATED, "SIGTERM")),
    "status": ((ExitCode.OK, "no step shown is FAILED or CORRUPT"),
               (ExitCode.FAILED, "a step shown is FAILED or CORRUPT (or the one step named has no status)"), _USAGE),
    "ids": ((ExitCode.OK, "the ids were printed"), (ExitCode.USAGE, "usage error, or the experiment does not load")),
    "check": ((ExitCode.OK, "every id matches its ids file"), (ExitCode.CHANGED, "ids changed"),
              (ExitCode.USAGE, "usage error, or an ids file missing or unreadable")),
    "verify": ((ExitCode.OK, "every output matches its manifest"), (ExitCode.FAILED, "problems found"), _USAGE),
    "doctor": ((ExitCode.OK, "every check passed"), (ExitCode.FAILED, "a check failed"),
               (ExitCode.USAGE, "usage error")),
    "completion": ((ExitCode.OK, "the script was printed"), (ExitCode.USAGE, "usage error")),
}


def exits(name: str) -> tuple[tuple[ExitCode, str], ...]:
    return CODES.get(name, ((ExitCode.OK, "done"), _USAGE))


def epilog(name: str) -> str:
    lines = ["examples:", *(f"  {example}" for example in EXAMPLES[name]), "", "exit codes:"]
    lines += [f"  {int(code):>3}  {meaning}" for code, meaning in exits(name)]
    return "\n".join(lines)
