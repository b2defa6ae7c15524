"""`stepgraph <command>` (alias: `python -m executor <command>`): one command line over experiments and prefixes.

Every command but ids, check and completion (which read no prefix) takes --prefix P (default:
env EXECUTOR_PREFIX, else cache/ in the project that holds the experiment, or the working
directory's project). A step is named the same way everywhere: its name (hello/shout) or its
step id (hello/shout-1a2b3c4d5e6f). Experiment flags (e.g. `--greeting Hi`) go after `--` and are
honoured by every command that loads an experiment. `stepgraph COMMAND --help` for its options.

    run      EXPERIMENT [FLAGS...]                 run an experiment (as `python EXPERIMENT FLAGS`)
    status   [EXPERIMENT | STEP] [--json]          every step under the prefix (or of the experiment)
    runs     [--json] [--limit N]                  the run history under the prefix
    ps                                             RUNNING leases under the prefix
    explain  EXPERIMENT STEP                       why STEP's id differs from its nearest earlier version
    graph    EXPERIMENT FILE                       draw the plan (.html, .svg, .png)
    ids      EXPERIMENT                            step ids + identity documents as JSON (the ids file)
    check    PATHS...                              CI: ids vs the committed ids files (exit 3 on change)
    adopt    EXPERIMENT STEP --from OLD_STEP_ID --reason TEXT [--dry-run] [--with-dependents] [--force]
    accept-drift EXPERIMENT STEP --reason TEXT     record that a code edit does not change STEP's output
    tag      STEP NAME@VERSION [--force --reason TEXT]   name a completed output (compare-and-swap)
    tags     [--json]                              the tags under the prefix
    lineage  STEP [--up|--down] [--json]           what an output was made from, or what was made from it
    taint    STEP|DIGEST --reason TEXT             recall an output: it and what derives from it re-run
    untaint  STEP|DIGEST --reason TEXT             reuse a tainted output again (both are recorded)
    verify   [STEP]                                outputs vs their manifests (exit 1 on problems)
    gc       EXPERIMENT... [--pin STEP_ID] [--delete --grace-hours H]   outputs no experiment reaches
    repair   --delete-status STEP                  remove a corrupt or abandoned status: the step re-runs
    report   [RUN]                                 rebuild a run's HTML report (runs/<run>.html) from storage
    serve    [--host H] [--port N|0] [--token-file F]   a live, read-only web view of the prefix (token in its URL)
    doctor   [--ray-address A]                     versions, the prefix's conditional writes, Ray, shadowing packages
    completion bash|zsh                            a shell completion script (eval "$(stepgraph completion bash)")

The ids file is `<experiment>.plan.json`, committed beside the experiment (`--update-plan` writes
it); a plan is what a run decides per step (run, skip, wait, blocked, stop, copy).

Object-store prefixes take fsspec storage options from the EXECUTOR_STORAGE_OPTIONS variable
(a JSON object, as runs read it) or `--storage-options JSON`.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Any, Callable, Sequence

from executor.core import exit_codes
from executor.core.errors import ExecutorError
from executor.core.exit_codes import ExitCode
from executor.engine.prefix import location
from executor.tools import command_help, commands, doctor, names_commands
from executor.tools.serve import cmd_serve

PROG = "stepgraph"
RENAMED_COMMANDS = {"plan": "ids"}  # an old name still works, with one line on stderr


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("stepgraph")
    except PackageNotFoundError:  # a checkout that was never installed
        return "unknown (not installed)"


# Why a command that reads no prefix takes no --prefix or --storage-options (said when one is given).
READS_NO_PREFIX = {"ids": "step ids are computed from the experiment file (and its flags after --) alone, "
                          "whatever the prefix",
                   "check": "it compares ids computed from experiment files with their ids files; no prefix is read",
                   "completion": "it prints a shell script; no prefix is read"}


class _Parser(argparse.ArgumentParser):
    """argparse with a did-you-mean for mistyped options (argparse only does it for commands).

    It remembers its own option strings and its commands (build_parser records them), because
    argparse keeps both in private attributes only; the completion script reads them too. The
    did-you-mean looks among the given command's options only: an option of another command is
    said to be one (`stepgraph ids --prefix`), never suggested as itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: list[str] = []  # before argparse's __init__, which adds -h/--help
        self.commands: dict[str, _Parser] = {}
        self.argv: list[str] = []  # what main() parses: which command an unknown option was given to
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        self.options.extend(n for n in names if isinstance(n, str) and n[:1] in self.prefix_chars)
        return super().add_argument(*names, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        import re

        match = re.search(r"unrecognized arguments: (\S+)", message)
        if match:
            message += self._hint(match.group(1).split("=")[0])
        super().error(message)

    def _hint(self, given: str) -> str:
        import difflib

        command = next((word for word in self.argv if word in self.commands), None)
        own = self.commands[command].options if command else self.options
        close = difflib.get_close_matches(given, sorted(set(own)), n=1, cutoff=0.7)
        if close:
            return f"; did you mean {close[0]}?"
        takers = [name for name, parser in self.commands.items() if given in parser.options]
        if command and takers:
            why = READS_NO_PREFIX.get(command, f"it is an option of {', '.join(takers[:4])}")
            return f"; `{PROG} {command}` takes no {given}: {why}; drop it (`{PROG} {command} --help` lists its options)"
        return ""


def build_parser() -> _Parser:
    epilog = __doc__.split("\n\n", 1)[1] + "\nexit codes:\n" + exit_codes.help_text()
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0], epilog=epilog,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command", parser_class=_Parser,
                                help="one of the commands below")

    def command(name: str, help_text: str, handler: Callable, *, storage: bool = True,
                prefix: bool = True) -> argparse.ArgumentParser:
        """One subcommand; every command shares --prefix and --storage-options. Add new ones here."""
        p = sub.add_parser(name, description=textwrap.fill(help_text, 88), epilog=command_help.epilog(name),
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # no help=: the epilog's table
                                                                                  # is the one list of commands
        if prefix:
            p.add_argument("--prefix", help="where outputs live (default: env EXECUTOR_PREFIX, else cache/ in the "
                                            "experiment's project)")
        if storage:
            p.add_argument("--storage-options", default=None, metavar="JSON",
                           help="fsspec storage options for an object-store prefix, as JSON")
        p.set_defaults(handler=handler)
        parser.commands[name] = p
        return p

    _add_running_commands(command)
    _add_explaining_commands(command)
    _add_naming_commands(command)
    _add_maintaining_commands(command)
    return parser


def _add_running_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """run, and what is stored and running: status, runs, ps (in `stepgraph --help`'s order)."""
    p = command("run", "run an experiment: the same as `python EXPERIMENT FLAGS...`", commands.cmd_run,
                storage=False)
    p.add_argument("experiment")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="executor and experiment flags (see `run EXPERIMENT "
                                                           "--help`)")

    p = command("status", "every step under the prefix (or of an experiment, or one step): state, when, "
                          "duration, attempts, last error, writing run", commands.cmd_status)
    p.add_argument("target", nargs="?", help="an experiment file, a step (name or step id), or a step's path")
    p.add_argument("--json", action="store_true", help="one JSON object per step, as a list")

    p = command("runs", "the run history under the prefix: when, who, what each run did", commands.cmd_runs)
    p.add_argument("--json", action="store_true", help="the runs as a JSON list")
    p.add_argument("--limit", type=int, default=20, help="newest N runs (default 20; 0: all)")

    p = command("ps", "RUNNING leases under the prefix", commands.cmd_ps)


def _add_explaining_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Ids and plans: explain, graph, ids, check, adopt, accept-drift."""
    p = command("explain", "why a step's id differs from its nearest earlier version", commands.cmd_explain)
    p.add_argument("experiment")
    p.add_argument("step", help="step name or step id")
    _cache_from_flag(p, "also say whether a run with it would copy the step, and from where; its records count "
                        "as earlier versions")

    p = command("graph", "draw an experiment's plan coloured by action", commands.cmd_graph)
    p.add_argument("experiment")
    p.add_argument("file", help="output picture: .html, .svg or .png")
    _cache_from_flag(p, "draw the plan of a run with it: steps it holds are copied")

    p = command("ids", "print an experiment's step ids and identity documents as JSON, recomputed from its file, "
                       "as its ids file (<experiment>.plan.json) holds them", commands.cmd_ids, storage=False,
                prefix=False)
    p.add_argument("experiment")

    p = command("check", "CI: compare every experiment's step ids with its committed ids file "
                         "(<experiment>.plan.json)", commands.cmd_check, storage=False, prefix=False)
    p.add_argument("paths", nargs="+", help="experiment files or directories (e.g. experiments/)")

    p = command("adopt", "declare a step's new id equivalent to an existing completed output", commands.cmd_adopt)
    p.add_argument("experiment", help="the experiment file declaring the step")
    p.add_argument("name", metavar="step", help="the step (name or its new step id)")
    p.add_argument("--from", dest="from_", required=True, metavar="OLD_STEP_ID",
                   help="the completed output to adopt: its step id (or output path under the prefix)")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why the two are equivalent (recorded)")
    p.add_argument("--dry-run", action="store_true", help="say what would be adopted; write nothing")
    p.add_argument("--with-dependents", action="store_true",
                   help="also adopt each dependent's new id from the output that consumed the old one")
    p.add_argument("--force", action="store_true",
                   help="adopt across a different step name or config type (needs --reason)")


    p = command("accept-drift", "record that a code edit does not change a completed step's output (the drift "
                                "warning stops for that code)", commands.cmd_accept_drift)
    p.add_argument("experiment", help="the experiment file declaring the step")
    p.add_argument("name", metavar="step", help="the step (name or step id)")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why the edit does not change the output (recorded)")


def _cache_from_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--cache-from", action="append", default=[], metavar="PREFIX",
                   help=f"a prefix a run would copy outputs of the same steps from (repeatable or comma-separated; "
                        f"env EXECUTOR_CACHE_FROM): {what}")


def _add_naming_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Names, lineage and recall: tag, tags, lineage, taint, untaint (docs/tags.md, lineage.md, taint.md)."""
    p = command("tag", "point NAME@VERSION at a completed output (created by compare-and-swap; a taken version "
                       "moves only with --force and a reason, its history kept)", names_commands.cmd_tag)
    p.add_argument("step", help="a completed step: name, step id or path")
    p.add_argument("tag", help="NAME@VERSION, e.g. tokenized/fineweb@2026.12")
    p.add_argument("--force", action="store_true", help="move a version already taken (needs --reason)")
    p.add_argument("--reason", help="why the tag moves (recorded)")

    p = command("tags", "the tags under the prefix and the outputs they point at", names_commands.cmd_tags)
    p.add_argument("--json", action="store_true", help="the tags as a JSON list")

    p = command("lineage", "what an output was made from (--up, the default) or what was made from it (--down), "
                           "from the records alone", names_commands.cmd_lineage)
    p.add_argument("step", help="a step: name, step id or path")
    direction = p.add_mutually_exclusive_group()
    direction.add_argument("--up", action="store_true", help="to the raw inputs (default)")
    direction.add_argument("--down", action="store_true", help="to everything under the prefix made from it")
    p.add_argument("--json", action="store_true", help="the outputs walked, with how each was reached, as JSON")

    for name, what in (("taint", "recall an output: plans re-run it and everything derived from it, here and in "
                                 "prefixes reading this one with --cache-from"),
                       ("untaint", "reuse a tainted output again (the taint and the untaint both stay recorded)")):
        p = command(name, what, getattr(names_commands, f"cmd_{name}"))
        p.add_argument("step", help="a step (name, step id or path) or a full digest")
        p.add_argument("--reason", required=True, help="why (recorded, shown in every plan that re-runs it)")


def _add_maintaining_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Outputs and the prefix: verify, gc, repair, doctor, report, serve, completion."""
    p = command("verify", "check step outputs against the manifests in their records", commands.cmd_verify)
    p.add_argument("path", nargs="?", help="a step (name, step id or path); default: every step under the prefix")
    p.add_argument("-v", "--verbose", action="store_true", help="also list steps that were not verified, and why")

    p = command("gc", "list (and with --delete remove) outputs no given experiment reaches", commands.cmd_gc)
    p.add_argument("experiments", nargs="+", help="experiment files whose steps are kept (with the flags after --)")
    p.add_argument("--pin", action="append", default=[], metavar="STEP_ID", help="also keep this output (repeatable)")
    p.add_argument("--delete", action="store_true", help="delete the unreachable outputs (default: only list)")
    p.add_argument("--grace-hours", type=float, default=24.0,
                   help="with --delete: keep outputs written less than this many hours ago (default 24)")

    p = command("repair", "repair stored state by hand", commands.cmd_repair)
    p.add_argument("--delete-status", required=True, metavar="STEP",
                   help="delete this step's status.json (corrupt or abandoned); the step re-runs")
    p.add_argument("--force", action="store_true", help="delete even a RUNNING status (only if its runner is gone)")

    p = command("doctor", "check versions, the prefix's conditional writes, the Ray address and shadowing packages",
                doctor.cmd_doctor)
    p.add_argument("--ray-address", help="a cluster to probe (default: RAY_ADDRESS)")

    p = command("report", "rebuild a run's HTML report (runs/<run>.html) from storage", commands.cmd_report)
    p.add_argument("run", nargs="?", help="a run file name or run id under <prefix>/runs (default: the latest)")

    p = command("serve", "a live, read-only web view of the prefix: steps, runs, logs, DAGs (token-protected)",
                cmd_serve)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; anything beyond "
                                                       "loopback prints a warning and still needs the token)")
    p.add_argument("--port", type=int, default=8270, help="port (default 8270; 0: any free port, printed)")
    p.add_argument("--token-file", metavar="F", help="read a stable access token from this file (default: a new "
                                                     "random token each start)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between updates of open pages (default 2)")

    p = command("completion", "print a shell completion script", commands.cmd_completion, storage=False, prefix=False)
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(build_parser=build_parser)  # completion is generated from this very parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in RENAMED_COMMANDS:
        print(f"`{PROG} {argv[0]}` is now `{PROG} {RENAMED_COMMANDS[argv[0]]}`", file=sys.stderr)
        argv[0] = RENAMED_COMMANDS[argv[0]]
    experiment_args: list[str] = []
    if argv[:1] != ["run"] and "--" in argv:
        cut = argv.index("--")
        argv, experiment_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    parser.argv = argv
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and ExitCode.USAGE
    args.experiment_args = experiment_args
    if args.command != "run" and experiment_args and not commands.loads_experiment(args):
        print(f"error: {PROG} {args.command} loads no experiment; flags after -- ({' '.join(experiment_args)}) "
              f"would be ignored", file=sys.stderr)
        return ExitCode.USAGE
    if hasattr(args, "storage_options"):  # the flag, else the same variable the runs read
        try:
            args.storage_options = location.storage_options_from(args.storage_options, os.environ)
        except ExecutorError as e:
            print(f"error: {e}", file=sys.stderr)
            return ExitCode.USAGE
    return commands.guarded(args.handler, args)


def entry() -> None:
    """The `stepgraph` console script: main(), and a reader that closes the pipe is no error."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `stepgraph status | head`: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = ExitCode.BROKEN_PIPE
    sys.exit(code)


if __name__ == "__main__":
    entry()
