"""`python -m executor <command>`: reproducibility and inspection tools over experiments and prefixes.

    check   experiments/                       CI: every experiment's ids vs its committed plan (exit 3 on change)
    plan    experiments/foo.py [-- FLAGS]        print the plan file content (ids + identities) as JSON
    adopt   --prefix P experiments/foo.py NAME --from OLD_STEP_ID [--reason TEXT] [-- FLAGS]
    verify  PATH                                 check outputs against their manifests (exit 1 on problems)
    gc      --prefix P experiments/a.py ... [--pin ID] [--delete --grace-hours H]
    status  STEP_OUTPUT_PATH                     a step's status and record, readable
    ps      --prefix P                           RUNNING leases under a prefix
    repair  --delete-status STEP_OUTPUT_PATH     remove a corrupt (or abandoned) status so the step re-runs
    doctor  [--prefix P] [--ray-address A]       versions, the prefix's conditional writes, Ray, shadowing packages
    report  --prefix P [RUN]                     rebuild a run's HTML report (runs/<run>.html) from storage

Experiment flags (e.g. `--greeting Howdy`) go after `--`. Object-store prefixes take fsspec
storage options as JSON with `--storage-options '{"endpoint_url": "http://127.0.0.1:9000"}'`
(default: the EXECUTOR_STORAGE_OPTIONS variable that runs read, or the usual environment variables
of gcsfs/s3fs). Exit codes: 0 ok, 1 problems found,
2 usage or config error, 3 plan changes.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from executor.core.errors import ExecutorError
from executor.engine import location
from executor.tools import commands, doctor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m executor", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def command(name: str, help_text: str, storage: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if storage:
            p.add_argument("--storage-options", default=None, metavar="JSON",
                           help="fsspec storage options for an object-store prefix, as JSON")
        return p

    p = command("check", "CI: compare every experiment's step ids with its committed plan file", storage=False)
    p.add_argument("paths", nargs="+", help="experiment files or directories (e.g. experiments/)")
    p.set_defaults(handler=commands.cmd_check)

    p = command("plan", "print an experiment's plan (ids and identity documents) as JSON", storage=False)
    p.add_argument("experiment")
    p.set_defaults(handler=commands.cmd_plan)

    p = command("adopt", "declare a step's new id equivalent to an existing completed output")
    p.add_argument("--prefix", help="where outputs live (default: EXECUTOR_PREFIX or cache/)")
    p.add_argument("experiment", help="the experiment file declaring the step")
    p.add_argument("name", help="the step's name (or its new step id)")
    p.add_argument("--from", dest="from_", required=True, metavar="OLD_STEP_ID",
                   help="the completed output to adopt: its step id (or output path under the prefix)")
    p.add_argument("--reason", help="why the two are equivalent (recorded)")
    p.set_defaults(handler=commands.cmd_adopt)

    p = command("verify", "check step outputs against the manifests in their records")
    p.add_argument("path", help="a step's output directory, or a prefix (every completed step under it)")
    p.add_argument("-v", "--verbose", action="store_true", help="also list steps that were not verified, and why")
    p.set_defaults(handler=commands.cmd_verify)

    p = command("gc", "list (and with --delete remove) outputs no given experiment reaches")
    p.add_argument("--prefix", help="where outputs live (default: EXECUTOR_PREFIX or cache/)")
    p.add_argument("experiments", nargs="+", help="experiment files whose steps are kept")
    p.add_argument("--pin", action="append", default=[], metavar="STEP_ID", help="also keep this output (repeatable)")
    p.add_argument("--delete", action="store_true", help="delete the unreachable outputs (default: only list)")
    p.add_argument("--grace-hours", type=float, default=24.0,
                   help="with --delete: keep outputs written less than this many hours ago (default 24)")
    p.set_defaults(handler=commands.cmd_gc)

    p = command("status", "show a step's status and record")
    p.add_argument("path", help="the step's output directory (or its .executor/status.json)")
    p.set_defaults(handler=commands.cmd_status)

    p = command("ps", "list RUNNING leases under a prefix")
    p.add_argument("--prefix", help="where outputs live (default: EXECUTOR_PREFIX or cache/)")
    p.set_defaults(handler=commands.cmd_ps)

    p = command("repair", "repair stored state by hand")
    p.add_argument("--delete-status", required=True, metavar="STEP_OUTPUT_PATH",
                   help="delete this step's status.json (corrupt or abandoned); the step re-runs")
    p.add_argument("--force", action="store_true", help="delete even a RUNNING status (only if its runner is gone)")
    p.set_defaults(handler=commands.cmd_repair)

    p = command("doctor", "check versions, the prefix's conditional writes, the Ray address and shadowing packages")
    p.add_argument("--prefix", help="where outputs live (default: EXECUTOR_PREFIX or cache/)")
    p.add_argument("--ray-address", help="a cluster to probe (default: RAY_ADDRESS)")
    p.set_defaults(handler=doctor.cmd_doctor)

    p = command("report", "rebuild a run's HTML report (runs/<run>.html) from storage")
    p.add_argument("--prefix", help="where outputs live (default: EXECUTOR_PREFIX or cache/)")
    p.add_argument("run", nargs="?", help="a run file name or run id under <prefix>/runs (default: the latest)")
    p.set_defaults(handler=commands.cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    experiment_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, experiment_args = argv[:cut], argv[cut + 1:]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and commands.EXIT_USAGE
    args.experiment_args = experiment_args
    if hasattr(args, "storage_options"):  # the flag, else the same variable the runs read
        try:
            args.storage_options = location.storage_options_from(args.storage_options, os.environ)
        except ExecutorError as e:
            print(f"error: {e}", file=sys.stderr)
            return commands.EXIT_USAGE
    return commands.guarded(args.handler, args)


if __name__ == "__main__":
    sys.exit(main())
