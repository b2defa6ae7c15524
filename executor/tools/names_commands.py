"""The handlers of `stepgraph tag`, `tags`, `lineage`, `taint` and `untaint` (presentation only: the
work is in executor/tools/tags.py, lineage.py and taint.py). Each returns an exit code."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from executor.core.errors import ExecutorError
from executor.core.exit_codes import ExitCode
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.prefix.prefixes import OpenedPrefix

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _opened(args: Any) -> OpenedPrefix:
    """The prefix, opened once (--prefix, else EXECUTOR_PREFIX, else cache/: `resolve_prefix`, the one
    place it is chosen), with the one answer every command gives a missing or empty prefix."""
    from executor.engine.prefix.prefixes import open_outputs

    return open_outputs(args.prefix, args.storage_options, os.environ)


def _rel(opened: OpenedPrefix, ref: str) -> str:
    """The output rel under the prefix of the step `ref` names (name, step id or path)."""
    from executor.tools.step_ref import step_path

    view = opened.view
    path = step_path(opened, ref)
    if not path.startswith(view.prefix + "/"):
        raise ExecutorError(f"{ref!r} ({path}) is not under the prefix {view.prefix}; pass --prefix")
    return path[len(view.prefix) + 1:]


def _who() -> dict[str, Any]:
    from executor.engine.run.provenance import user_and_host

    who = user_and_host()
    return {"user": who["user"], "host": who["host"]}


def cmd_tag(args: Any) -> int:
    from executor.tools.tags import tag

    opened = _opened(args)
    entry = tag(opened.store, _rel(opened, args.step), args.tag, by=_who(), at=time.time(),
                force=args.force, reason=args.reason)
    moved = f" (moved from {entry.moved_from[:12]}…: {entry.reason})" if entry.moved_from else ""
    print(f"{entry.tag} -> {entry.step_id} (digest {entry.digest[:16]}…){moved}")
    return ExitCode.OK


def cmd_tags(args: Any) -> int:
    from executor.tools.tags import list_tags

    tags = list_tags(_opened(args).store)
    if args.json:
        print(json.dumps([t.to_json() for t in tags], indent=1))
        return ExitCode.OK
    if not tags:
        print("no tags under the prefix (stepgraph tag STEP NAME@VERSION makes one)")
    for t in tags:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t.at)) if t.at else "?"
        print(f"{t.tag:<32} {t.step_id:<40} {t.digest[:16]}…  by {t.by.get('user', '?')} {when}")
    return ExitCode.OK


def cmd_lineage(args: Any) -> int:
    from executor.tools.lineage import lineage_down, lineage_up

    opened = _opened(args)
    view, rel = opened.view, _rel(opened, args.step)
    found = lineage_down(view, rel) if args.down else lineage_up(view, rel, opened.storage)
    if args.json:
        print(json.dumps({"direction": "down" if args.down else "up", "nodes": [n.to_json() for n in found.nodes],
                          "cost": found.cost}, indent=1))
        return ExitCode.OK
    for n in found.nodes:
        where = "" if n.prefix == view.prefix else f"  [{n.prefix}]"
        how = f"{n.via} " if n.via else ""
        print(f"{'  ' * n.depth}{how}{n.rel} ({n.state}){where}")
    print(f"{len(found.nodes)} output(s); {found.cost['listings']} listing(s), {found.cost['reads']} read(s)")
    return ExitCode.OK


def cmd_taint(args: Any) -> int:
    return _taint(args, "taint")


def cmd_untaint(args: Any) -> int:
    return _taint(args, "untaint")


def _taint(args: Any, action: str) -> int:
    from executor.tools.taint import TaintEvent, record_event, taint_output

    opened = _opened(args)
    if _DIGEST.match(args.step):
        event = TaintEvent(action, args.reason, _who(), time.time())
        found = record_event(opened.store, args.step, event)
    else:
        found = taint_output(opened.store, _rel(opened, args.step), action, args.reason, by=_who(), at=time.time())
    who = found.last.step_id or found.digest
    if action == "taint":
        print(f"tainted {who}: plans under this prefix (and those reading it with --cache-from) re-run it and "
              f"everything made from it; `stepgraph lineage {who} --down` lists what was")
    else:
        print(f"untainted {who}: its output is reused again")
    return ExitCode.OK


def print_taints(view: PrefixView, step_ids: set[str]) -> int:
    """`verify`'s lines on the tainted outputs among `step_ids` (one listing of taints/); their count."""
    from executor.tools.taint import read_taints

    tainted = [t for t in read_taints(view.store).values()
               if t.tainted and t.last.step_id in step_ids]
    for t in tainted:
        print(f"⚠ {t.last.step_id}: tainted ({t.last.reason}, by {t.last.by.get('user', '?')}); plans re-run it "
              f"and what is made from it (`stepgraph untaint` reverses it)")
    return len(tainted)
