"""Reads that cross locations: steps whose inputs live in a bucket of another location than the prefix's.

A step's config names its inputs; every `gs://` or `s3://` string in it whose bucket sits in another
location than the prefix's bucket is a cross-location read (egress is billed and slow). The plan
notes each one per step, with its size when a listing can tell, and a run refuses to start when
the total is over the execution-only budget (`--cross-region-budget-gb`, default 10) unless raised.
Dependency outputs live under the prefix, so only plain paths can cross.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from executor.core.errors import ExecutorError
from executor.core.plan import Action, Plan
from executor.core.locations import Storage
from executor.core.urls import is_object_store, protocol_of, split_url
from executor.engine import location

GB = 10**9


@dataclass(frozen=True)
class CrossRegionRead:
    step: str
    url: str
    location: str
    prefix_location: str
    bytes: int | None  # None when the size could not be listed

    def describe(self) -> str:
        size = f"{self.bytes / GB:.2f} GB" if self.bytes is not None else "size unknown"
        return (f"{self.step} reads {self.url} ({size}) from {self.location}; "
                f"the prefix is in {self.prefix_location}")


def _bucket(url: str) -> str:
    return split_url(url)[1].split("/", 1)[0]


def bucket_location(url: str, storage: Storage) -> str | None:
    """The location (GCS) or region (S3) of `url`'s bucket, upper-case; None if it cannot be read."""
    protocol = protocol_of(url)
    try:
        fs, _ = location.url_to_fs(url, storage)
        if protocol == "gs":
            return str(fs.call("GET", "b/{}", _bucket(url), json_out=True)["location"]).upper()
        if protocol == "s3":
            answer = fs.call_s3("get_bucket_location", Bucket=_bucket(url))
            return str(answer.get("LocationConstraint") or "us-east-1").upper()  # None means us-east-1
    except Exception:  # no permission to read bucket metadata: say nothing rather than guess
        return None
    return None


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v)


def _size(url: str, storage: Storage) -> int | None:
    try:
        fs, path = location.url_to_fs(url, storage)
        paths = fs.expand_path(path, recursive=True) if any(c in path for c in "*?[") else [path]
        return int(sum(fs.du(p, total=True) for p in paths))
    except Exception:
        return None


def cross_region_reads(plan: Plan, prefix: str, storage: Storage) -> list[CrossRegionRead]:
    """Per step that will run, its inputs in buckets of another location than the prefix's (each
    bucket asked with the options `storage` has for it)."""
    if not is_object_store(prefix):
        return []
    prefix_location = bucket_location(prefix, storage)
    if prefix_location is None:
        return []
    locations: dict[str, str | None] = {_bucket(prefix): prefix_location}
    found = []
    for decision in plan.decisions.values():
        if decision.action not in (Action.RUN, Action.WAIT):
            continue
        for url in dict.fromkeys(_strings(decision.node.step.config)):
            if not is_object_store(url) or _bucket(url) == _bucket(prefix):
                continue
            bucket = _bucket(url)
            if bucket not in locations:
                locations[bucket] = bucket_location(url, storage)
            where = locations[bucket]
            if where is not None and where != prefix_location:
                found.append(CrossRegionRead(decision.node.name, url, where, prefix_location, _size(url, storage)))
    return found


def check_budget(reads: list[CrossRegionRead], budget_gb: float) -> None:
    """Refuse a run whose known cross-location bytes exceed the budget, naming the steps and the fix."""
    total = sum(r.bytes or 0 for r in reads)
    if total > budget_gb * GB:
        steps = ", ".join(sorted({r.step for r in reads}))
        raise ExecutorError(f"cross-region reads of {total / GB:.2f} GB ({steps}) exceed the budget of "
                            f"{budget_gb:g} GB; nothing was started. Copy the inputs to the prefix's location, "
                            f"or raise the budget with --cross-region-budget-gb {total / GB * 1.1:.0f}")


def note_cross_region_reads(plan: Plan, prefix: str, storage: Storage, reporter: Any,
                            budget_gb: float | None = None) -> None:
    """Print a note per cross-location read; with a budget, refuse when the total exceeds it."""
    from rich.markup import escape

    reads = cross_region_reads(plan, prefix, storage)
    for read in reads:
        reporter.info(f"[yellow]cross-region read:[/] {escape(read.describe())}")
    if budget_gb is not None:
        check_budget(reads, budget_gb)
