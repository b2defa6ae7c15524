"""The plan as JSON (`--dry-run --json`): one document, a row per step, written a thousand rows at a time."""

from __future__ import annotations

import codecs
import json
from typing import IO, Any, Mapping

import orjson

from executor.core.plan import Action, Plan
from executor.engine.prefix import outputs


def plan_rows(plan: Plan, prefix: str, forecasts: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A row per step; `forecasts`: step digest -> its shard forecast (executor.tools.shard_forecast)."""
    rows = []
    for d in plan.decisions.values():  # a row per step of a 100,000-step plan: attributes read once each
        node, action = d.node, d.action
        rel = node.output_rel
        status = d.observed.status if action == Action.WAIT else None
        rows.append({
            "name": node.step.name, "step_id": node.step_id, "digest": node.digest,
            "output_path": outputs.join(prefix, rel),
            "action": action.value, "reason": d.reason, "dependencies": list(node.deps),
            "lease": (None if status is None or status.owner is None else
                      {"host": status.owner.host, "pid": status.owner.pid, "run_id": status.owner.run_id,
                       "heartbeat_written_at": status.written_at}),
        })
        if forecasts and node.digest in forecasts:  # an incremental data step: the shards it expects to reuse
            rows[-1]["shard_forecast"] = forecasts[node.digest]
        if d.sources:  # a copy: where from (best first) and how many bytes
            rows[-1]["copy_from"] = [{"prefix": s.prefix, "run_id": s.run_id, "bytes": s.bytes} for s in d.sources]
    return rows


def write_plan_json(plan: Plan, prefix: str, out: IO[str], forecasts: Mapping[str, dict[str, Any]] | None = None) -> None:
    """The plan as one JSON document, a step per line: 10,000 steps are 4 MB. Rows are encoded by
    orjson (several times faster than json.dumps) and written a thousand at a time; a stream that
    cannot take UTF-8 gets json.dumps' ASCII escapes instead."""
    utf8 = codecs.lookup(getattr(out, "encoding", None) or "utf-8").name == "utf-8"  # StringIO: None
    dumps = (lambda row: orjson.dumps(row).decode()) if utf8 else json.dumps
    out.write(f'{{"schema": 1, "prefix": {json.dumps(prefix)}, "steps": [')
    rows = plan_rows(plan, prefix, forecasts)
    for start in range(0, len(rows), 1000):
        out.write(("\n" if start == 0 else ",\n") + ",\n".join([dumps(row) for row in rows[start:start + 1000]]))
    out.write("\n]")
    if plan.mirrors:  # mirrored inputs (executor.engine.transfers.mirror): complete here, or copied from where, how much
        out.write(', "mirrors": ' + json.dumps(mirror_rows(plan)))
    out.write("}\n")


def mirror_rows(plan: Plan) -> list[dict[str, Any]]:
    return [{"logical": m.logical, "path": m.rel, "complete": m.complete, "bytes": m.bytes_to_copy,
             "sources": [{"url": c.url, "bytes": c.bytes, "files": len(c.files)} for c in m.candidates],
             "read_by": list(m.readers)} for m in plan.mirrors.values()]
