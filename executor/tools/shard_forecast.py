"""The dry run's shard forecast: how many shards each incremental data step expects to reuse.

A step function that reuses shard results (steps/shard_reuse.py) carries `fn.shard_forecast(config,
checksums)`: from its resolved config and the checksums of its upstream outputs' manifests (output
file URL -> the manifest's checksum entry) it returns (expected reused, shards), a sentence saying
why it cannot tell, or None (nothing to say). This module resolves the config of each step the plan
runs as the run would (dependency outputs, its own output, fixed paths under the prefix), reads the
upstream records in one read_many, and calls the forecast with the run's storage options. A
forecast reads listings and small files, never the shards; a failing one is a line, never an error.
"""

from __future__ import annotations

from typing import Any

from executor.core.graph import Graph, StepNode
from executor.core.plan import Action, Plan
from executor.core.step import MirroredPath, OutputPathOf, PrefixPath, TaggedOutput, ThisOutputPath
from executor.core.tree import resolve
from executor.engine.prefix import location, outputs
from executor.engine.events import ShardsForecast
from executor.engine.prefix.prefix_view import PrefixView


class _Unresolvable(Exception):
    """A placeholder a dry run cannot resolve without running (mirrored inputs, tags)."""


def shard_forecasts(graph: Graph, plan: Plan, prefix: str, storage_options: Any = None) -> dict[str, str]:
    """Step digest -> one line ("expects to reuse 14 of 16 shards (2 to process)") for each step the
    plan runs whose function carries a shard forecast."""
    nodes = [d.node for d in plan.decisions.values()
             if d.action == Action.RUN and callable(getattr(d.node.step.fn, "shard_forecast", None))]
    if not nodes:
        return {}
    storage = location.storage_from(storage_options, prefix)
    upstream = sorted({graph.nodes[d].output_rel for n in nodes for d in n.deps})
    records = PrefixView.open(prefix, storage).records(upstream) if upstream else {}
    checksums = {outputs.join(prefix, rel, entry["path"]): entry.get("checksum") or {}
                 for rel, record in records.items() for entry in record.get("manifest") or ()}
    lines = {}
    for node in nodes:
        pending = [graph.nodes[d].name for d in node.deps if graph.nodes[d].output_rel not in records]
        if pending:
            lines[node.digest] = f"not forecast: {', '.join(pending)} runs first (its manifest will say)"
            continue
        line = _forecast(graph, node, prefix, storage, checksums)
        if line is not None:
            lines[node.digest] = line
    return lines


def _forecast(graph: Graph, node: StepNode, prefix: str, storage: Any, checksums: dict[str, Any]) -> str | None:
    try:
        config = _resolved(graph, node, prefix)
        with location.using(storage):
            said = node.step.fn.shard_forecast(config, checksums)
    except _Unresolvable as e:
        return f"not forecast: {e}"
    except Exception as e:  # noqa: BLE001 - a forecast must never break the dry run
        return f"not forecast: {type(e).__name__}: {e}"
    if said is None or isinstance(said, str):
        return said
    reused, total = said
    return f"expects to reuse {reused} of {total} shards ({total - reused} to process)"


def _resolved(graph: Graph, node: StepNode, prefix: str) -> Any:
    own = outputs.join(prefix, node.output_rel)

    def substitute(value: Any, path: tuple) -> Any:
        if isinstance(value, OutputPathOf):
            return outputs.join(prefix, graph.nodes[graph.digest_of(value.step)].output_rel, value.sub)
        if isinstance(value, ThisOutputPath):
            return outputs.join(own, value.sub)
        if isinstance(value, PrefixPath):
            return outputs.join(prefix, value.path)
        if isinstance(value, (MirroredPath, TaggedOutput)):
            raise _Unresolvable(f"{type(value).__name__} inputs are resolved when the step runs")
        return value

    return resolve(node.step.config, substitute)


def forecast_event(graph: Graph, plan: Plan, prefix: str, storage_options: Any = None) -> ShardsForecast | None:
    """The dry run's forecast as one event, shown after the plan table (None when no step has one)."""
    lines = shard_forecasts(graph, plan, prefix, storage_options)
    if not lines:
        return None
    return ShardsForecast(tuple((graph.nodes[digest].name, line) for digest, line in lines.items()))
