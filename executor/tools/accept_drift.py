"""Accept a drift: "this edit does not change this output", recorded with who, when and why.

Committed records are never rewritten (DESIGN §8), so an acceptance is a file of its own beside the
record it is about: `<output>/.executor/drift-accepted/<fingerprint digest>.json`, written once with
`create_if_absent` (append-only: a second acceptance of the same code is refused, a later edit needs
a new one). It names the accepted fingerprint (every reached function's digest), the one the record
holds, the changed functions, the reason, and who accepted it (user, host, git state) and when.
The drift check (executor/tools/drift.py) is silent for a step whose code today is an accepted one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from executor.core.errors import ExecutorError, StatusError
from executor.core.graph import Graph
from executor.core.plan import Action, Decision, Observed
from executor.core.record import State, parse_status, record_key, status_key
from executor.engine.prefix import outputs
from executor.engine.prefix.prefixes import OpenedPrefix
from executor.tools.drift import accepted_key, compare

ACCEPTANCE_SCHEMA = 1


@dataclass(frozen=True)
class Acceptance:
    name: str
    changed: str  # the changed functions, by name
    path: str  # where the acceptance was written (or would have been)
    document: dict[str, Any]


def accept_drift(graph: Graph, name: str, opened: OpenedPrefix, *, reason: str, accepted_by: dict[str, Any],
                 now: float | None = None) -> Acceptance:
    """Record that the drift of step `name` (its code today vs. its record) does not change its output.
    Raises ExecutorError (nothing written) when there is no drift to accept, or it is accepted already."""
    from executor.tools.adopt import pick_node
    from executor.engine.run.fingerprint import code_fingerprint

    if not reason or not reason.strip():
        raise ExecutorError("accept-drift needs --reason TEXT: why this edit does not change the step's output")
    node = pick_node(graph, name)
    prefix, store, fs = opened.url, opened.store, opened.fs
    found = store.read(status_key(node.output_rel))
    try:
        status = parse_status(found.data, status_key(node.output_rel)) if found is not None else None
    except StatusError as e:
        raise ExecutorError(str(e)) from None
    if status is None or status.state != State.SUCCESS:
        raise ExecutorError(f"{node.name}: no completed output under {prefix} ({node.step_id}); there is no drift "
                            f"to accept until it has run")
    current = code_fingerprint(node.step.fn)
    if current is None:
        raise ExecutorError(f"{node.name}: the source of its step function cannot be found (a lambda or a function "
                            f"typed into a REPL), so its code is not compared and there is nothing to accept")
    decision = Decision(node, Action.SKIP, "", Observed(status, found.generation))
    rel = status.alias_of["output_rel"] if status.alias_of else node.output_rel
    try:
        record = outputs.read_record(fs, outputs.join(prefix, record_key(rel)))
    except (OSError, StatusError) as e:
        raise ExecutorError(f"{node.name}: its record cannot be read ({e}); nothing to compare") from None
    drift = compare(decision, record, current)
    if drift is None:
        raise ExecutorError(f"{node.name}: its code is unchanged since {node.step_id} was produced; nothing to accept")
    return _write(store, prefix, drift, record, reason.strip(), accepted_by, time.time() if now is None else now)


def _write(store: Any, prefix: str, drift: Any, record: dict | None, reason: str, accepted_by: dict[str, Any],
           now: float) -> Acceptance:
    provenance = (record or {}).get("provenance") or {}
    recorded = provenance.get("code_fingerprint") or {"function_sha256": provenance.get("function_sha256")}
    key = accepted_key(drift.record_rel, drift.current)
    document = {"schema": ACCEPTANCE_SCHEMA, "kind": "drift-accepted", "step": drift.name, "step_id": drift.step_id,
                "accepted": drift.current, "changed": drift.what(), "recorded": recorded,
                "reason": reason, "accepted_by": accepted_by, "accepted_at": now,
                "accepted_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
    if store.create_if_absent(key, json.dumps(document, indent=1, sort_keys=True).encode()) is None:
        raise ExecutorError(f"{drift.name}: this drift ({drift.what()}) was accepted already "
                            f"({outputs.join(prefix, key)})")
    return Acceptance(drift.name, drift.what(), outputs.join(prefix, key), document)

