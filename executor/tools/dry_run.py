"""The dry run as events: the plan a run would act on, and what it would find and move; writes nothing.

`dry_run` emits, in order: DriftFound per completed step whose code changed, PlanMade (dry_run=True),
ChangeNoted per new id with an earlier version, ShardsForecast (incremental data steps), StandbyNoted
(--cache-from), MirrorPlanned per mirrored input, CrossRegionNoted per cross-location read and TransferRefusal when the run would be
refused (executor/engine/events.py). The command line renders them (console_view.py); a library
caller subscribes its own function and gets the same plan, nothing printed:
`dry_run(steps, executor.Options(prefix=...), subscribers=[seen.append])`. `dry_run_json` is
`--dry-run --json`: the plan as one JSON document, shard forecasts in the rows.
"""

from __future__ import annotations

from typing import IO, Any, Iterable, Mapping

from executor.core.errors import ExecutorError
from executor.core.graph import Graph
from executor.core.plan import Plan
from executor.engine.events import Events, MirrorPlanned, PlanMade, StandbyNoted, Subscriber, TransferRefusal


def dry_run(steps: Graph | Iterable[Any], options: Any = None, *, subscribers: Iterable[Subscriber] = (),
            environ: Mapping[str, str] | None = None, main_file: str | None = None,
            description: str | None = None) -> Any:
    """Plan `steps` (ExecutorSteps, or their Graph) with `options` (executor.api.Options) and report
    it to `subscribers`; writes nothing and returns the decided plan (executor.api.Decided)."""
    from executor import api
    from executor.engine.transfers.regions import note_cross_region_reads
    from executor.engine.transfers.budget import check_transfer_budget
    from executor.tools.drift import warn_drift
    from executor.tools.explain import note_changes
    from executor.tools.shard_forecast import forecast_event

    options, environ, events = options or api.Options(), api.environment(environ), Events(subscribers)
    if not isinstance(steps, Graph):  # opened once: the graph's tags and the plan read the same prefix
        options = api.with_opened_prefix(options, environ)
    graph = steps if isinstance(steps, Graph) else api.graph_of(list(steps), options, environ)
    planned = api.decide(graph, options, environ=environ)
    plan, prefix = planned.plan, planned.prefix
    warn_drift(plan, prefix, planned.fs, events)  # issue 7: completed outputs whose step code changed
    events.emit(PlanMade(graph, plan, prefix, description, planned.fs, planned.storage_options, dry_run=True,
                         store=planned.store))
    note_changes(graph, plan, prefix, planned.fs, main_file, events)
    forecast = forecast_event(graph, plan, prefix, planned.storage_options, cache_from_of(options, environ, prefix))
    if forecast:  # issue 48: shards incremental data steps expect to reuse
        events.emit(forecast)
    if plan.standby:  # --cache-from: what is neither run nor copied, and why
        events.emit(StandbyNoted(tuple(d.node.name for d in plan.standby.values())))
    for event in mirrors_planned(plan):  # what would be copied, from where, how much
        events.emit(event)
    reads = note_cross_region_reads(plan, prefix, planned.storage_options, events)
    try:  # what a run would refuse, said now
        check_transfer_budget(plan, reads, options.transfer_budget_gb)
    except ExecutorError as e:
        events.emit(TransferRefusal(str(e)))
    return planned


def dry_run_json(graph: Graph, options: Any, out: IO[str], *, subscribers: Iterable[Subscriber] = (),
                 environ: Mapping[str, str] | None = None) -> Any:
    """`--dry-run --json`: the plan as one JSON document on `out` (tools/plan_json.py), each step
    the plan runs with a shard forecast carrying it in its row; drift warnings go to the
    subscribers (the command line: stderr). Writes nothing else; returns the decided plan."""
    from executor import api
    from executor.tools.drift import warn_drift
    from executor.tools.plan_json import write_plan_json
    from executor.tools.shard_forecast import shard_forecasts

    options, environ = options or api.Options(), api.environment(environ)
    planned = api.decide(graph, options, environ=environ)
    warn_drift(planned.plan, planned.prefix, planned.fs, Events(subscribers))
    forecasts = shard_forecasts(graph, planned.plan, planned.prefix, planned.storage_options,
                                cache_from_of(options, environ, planned.prefix))
    write_plan_json(planned.plan, planned.prefix, out, {d: f.as_json() for d, f in forecasts.items()})
    return planned


def cache_from_of(options: Any, environ: Mapping[str, str], prefix: str) -> tuple[str, ...]:
    """The run's --cache-from prefixes (else EXECUTOR_CACHE_FROM), as a run would take them."""
    from executor.engine.transfers.cache_from import ENV_VAR, cache_from_list

    if not options.cache_from and not environ.get(ENV_VAR):
        return ()
    return cache_from_list(options.cache_from, environ, prefix)


def mirrors_planned(plan: Plan) -> list[MirrorPlanned]:
    """A MirrorPlanned event per mirrored input of the plan (executor.engine.transfers.mirror.MirrorInput)."""
    found = []
    for m in plan.mirrors.values():
        if m.complete or m.copied_elsewhere or not m.candidates:
            found.append(MirrorPlanned(m.logical, m.rel, complete=m.complete, waiting=m.copied_elsewhere))
            continue
        first = m.candidates[0]
        found.append(MirrorPlanned(m.logical, m.rel, source=first.url, bytes=first.bytes, files=len(first.files),
                                   also=tuple(c.url for c in m.candidates[1:])))
    return found
