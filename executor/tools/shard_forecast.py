"""The dry run's shard forecast: how many shards each incremental data step expects to reuse.

A step function that reuses shard results (steps/shard_reuse.py) carries `fn.shard_forecast(config,
checksums)`: from its resolved config and the checksums of its upstream outputs' manifests (output
file URL -> the manifest's checksum entry) it returns (expected reused, shards), a sentence saying
why it cannot tell, or None (nothing to say). This module resolves the config of each step the plan
runs as the run would (dependency outputs, its own output, fixed paths under the prefix), reads the
upstream records in one read_many, and calls the forecast with the run's storage options and its
--cache-from prefixes (as a run hands them to the step, so their outputs count as sources). A
forecast reads listings and small files, never the shards; a failing one is a line, never an error.
The dry run shows the lines (a ShardsForecast event); `--dry-run --json` gives each step's row a
`shard_forecast` (`{"reused", "to_process", "shards"}` or `{"reason"}`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.core.graph import Graph, StepNode
from executor.core.plan import Action, Plan
from executor.core.step import MirroredPath, OutputPathOf, PrefixPath, TaggedOutput, ThisOutputPath
from executor.core.tree import resolve
from executor.engine.prefix import location, outputs
from executor.engine.events import ShardsForecast
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.worker.shard_sources import CacheFrom, caching_from


class _Unresolvable(Exception):
    """A placeholder a dry run cannot resolve without running (mirrored inputs, tags)."""


@dataclass(frozen=True)
class Forecast:
    """One step's forecast: shards it expects to reuse of how many, or why it cannot tell."""

    reused: int | None = None
    shards: int | None = None
    reason: str | None = None

    @property
    def line(self) -> str:
        if self.reason is not None:
            return self.reason
        return f"expects to reuse {self.reused} of {self.shards} shards ({self.shards - self.reused} to process)"

    def as_json(self) -> dict[str, Any]:
        if self.reason is not None:
            return {"reason": self.reason}
        return {"reused": self.reused, "to_process": self.shards - self.reused, "shards": self.shards}


def shard_forecasts(graph: Graph, plan: Plan, prefix: str, storage_options: Any = None,
                    cache_from: tuple[str, ...] = ()) -> dict[str, Forecast]:
    """Step digest -> its Forecast, for each step the plan runs whose function carries a shard
    forecast; with `cache_from` (the run's --cache-from prefixes) the step's committed outputs
    there count as sources, as in the run (executor.cache_from_outputs)."""
    nodes = [d.node for d in plan.decisions.values()
             if d.action == Action.RUN and callable(getattr(d.node.step.fn, "shard_forecast", None))]
    if not nodes:
        return {}
    storage = location.storage_from(storage_options, prefix)
    upstream = sorted({graph.nodes[d].output_rel for n in nodes for d in n.deps})
    records = PrefixView.open(prefix, storage).records(upstream) if upstream else {}
    checksums = {outputs.join(prefix, rel, entry["path"]): entry.get("checksum") or {}
                 for rel, record in records.items() for entry in record.get("manifest") or ()}
    sources = CacheFrom(prefix, tuple(cache_from)) if cache_from else None
    found = {}
    for node in nodes:
        pending = [graph.nodes[d].name for d in node.deps if graph.nodes[d].output_rel not in records]
        if pending:
            found[node.digest] = Forecast(reason=f"not forecast: {', '.join(pending)} runs first "
                                                 f"(its manifest will say)")
            continue
        forecast = _forecast(graph, node, prefix, storage, checksums, sources)
        if forecast is not None:
            found[node.digest] = forecast
    return found


def _forecast(graph: Graph, node: StepNode, prefix: str, storage: Any, checksums: dict[str, Any],
              sources: CacheFrom | None) -> Forecast | None:
    try:
        config = _resolved(graph, node, prefix)
        with location.using(storage), caching_from(sources):
            said = node.step.fn.shard_forecast(config, checksums)
    except _Unresolvable as e:
        return Forecast(reason=f"not forecast: {e}")
    except Exception as e:  # noqa: BLE001 - a forecast must never break the dry run
        return Forecast(reason=f"not forecast: {type(e).__name__}: {e}")
    if said is None:
        return None
    if isinstance(said, str):
        return Forecast(reason=said)
    return Forecast(reused=said[0], shards=said[1])


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


def forecast_event(graph: Graph, plan: Plan, prefix: str, storage_options: Any = None,
                   cache_from: tuple[str, ...] = ()) -> ShardsForecast | None:
    """The dry run's forecast as one event, shown after the plan table (None when no step has one)."""
    found = shard_forecasts(graph, plan, prefix, storage_options, cache_from)
    if not found:
        return None
    return ShardsForecast(tuple((graph.nodes[digest].name, f.line) for digest, f in found.items()))
