"""Reads that cross locations: steps whose inputs live in a bucket of another location than the prefix's.

A step's config names its inputs; every `gs://` or `s3://` string in it whose bucket sits in another
location than the prefix's bucket is a cross-location read (egress is billed and slow). The plan
notes each one per step, with its size when a listing can tell; its bytes count against the run's
one transfer budget (executor.engine.transfers.budget, `--transfer-budget-gb`, default 10). Dependency
outputs live under the prefix, and a mirrored input is read from its copy there, so only plain
paths can cross.

It never guesses: a bucket whose location cannot be read is not "the same location" but an input
the plan names, with the error, as one it could not check; a cross-location read whose size cannot
be listed (an error, or nothing at that path) counts as over any finite budget, and the refusal
says so and how to allow it (`--transfer-budget-gb inf`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Iterable

from executor.core.errors import ExecutorError
from executor.core.plan import Action, Plan
from executor.core.locations import Storage
from executor.core.tree import is_config_dataclass
from executor.core.urls import is_object_store, protocol_of, split_url
from executor.engine.prefix import location
from executor.engine.events import CrossRegionNoted
from executor.engine.transfers.runner_region import runner_region

GB = 10**9


@dataclass(frozen=True)
class CrossRegionRead:
    step: str
    url: str
    location: str
    prefix_location: str
    bytes: int | None  # None when the size could not be listed
    size_problem: str | None = None  # why not

    def describe(self) -> str:
        size = f"{self.bytes / GB:.2f} GB" if self.bytes is not None else f"size unknown: {self.size_problem}"
        return (f"{self.step} reads {self.url} ({size}) from {self.location}; "
                f"the prefix is in {self.prefix_location}")


@dataclass(frozen=True)
class Undetermined:
    """An input whose bucket location, or the prefix's, could not be read: the check could not tell."""

    step: str
    url: str
    why: str

    def describe(self) -> str:
        return f"could not tell whether {self.step} reading {self.url} crosses regions: {self.why}"


def _bucket(url: str) -> str:
    return split_url(url)[1].split("/", 1)[0]


def bucket_location(url: str, storage: Storage) -> str | None:
    """The location (GCS) or region (S3) of `url`'s bucket, upper-case; None if it cannot be read."""
    return locate_bucket(url, storage)[0]


def locate_bucket(url: str, storage: Storage) -> tuple[str | None, str | None]:
    """(the bucket's location upper-case, None) or (None, why it could not be read)."""
    protocol = protocol_of(url)
    try:
        fs, _ = location.url_to_fs(url, storage)
        if protocol == "gs":
            return str(fs.call("GET", "b/{}", _bucket(url), json_out=True)["location"]).upper(), None
        if protocol == "s3":
            answer = fs.call_s3("get_bucket_location", Bucket=_bucket(url))
            return str(answer.get("LocationConstraint") or "us-east-1").upper(), None  # None means us-east-1
    except Exception as e:  # e.g. no permission to read bucket metadata: said, never taken as "same region"
        return None, f"the location of bucket {_bucket(url)} could not be read ({type(e).__name__}: {str(e)[:200]})"
    return None, f"no way to read a bucket location for {protocol}://"


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif is_config_dataclass(value):  # placeholders are not: a dependency's output, a prefix path and
        # a mirrored input (its copy: executor.engine.transfers.mirror) are read under the prefix, and what a
        # dependency reads is that step's read, not this one's
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v)


def _size(url: str, storage: Storage) -> tuple[int | None, str | None]:
    """(bytes, None) or (None, why the size is unknown): nothing at the path is unknown, not 0. A
    glob counts each byte once: a folder it matches counts what lies below it, and what lies below
    a folder it also matched (`d/*` names `d/sub`; `d/**` names `d/sub` and `d/sub/a`) is not
    counted again."""
    try:
        fs, path = location.url_to_fs(url, storage)
        if any(c in path for c in "*?["):
            paths = _outermost(fs.glob(path))
        else:
            paths = [path] if fs.exists(path) else []
        if not paths:
            return None, "nothing found at that path"
        return int(sum(fs.du(p, total=True) for p in paths)), None
    except Exception as e:
        return None, f"listing failed ({type(e).__name__}: {str(e)[:200]})"


def _outermost(paths: list[str]) -> list[str]:
    """The paths that lie below no other of them."""
    named = set(paths)
    return [p for p in paths if not any(p[:slash.start()] in named for slash in re.finditer("/", p))]


def _inputs_elsewhere(plan: Plan, prefix: str) -> Iterable[tuple[str, str]]:
    """(step name, url) for each object-store string, outside the prefix's bucket, of a step that will run."""
    for decision in plan.decisions.values():
        if decision.action not in (Action.RUN, Action.WAIT):
            continue
        for url in dict.fromkeys(_strings(decision.node.step.config)):
            if is_object_store(url) and _bucket(url) != _bucket(prefix):
                yield decision.node.name, url


def survey(plan: Plan, prefix: str, storage: Storage) -> tuple[list[CrossRegionRead], list[Undetermined]]:
    """The cross-location reads (each bucket asked with the options `storage` has for it), and the
    inputs for which that could not be told (a location unreadable), with why."""
    if not is_object_store(prefix):
        return [], []
    inputs = list(_inputs_elsewhere(plan, prefix))
    if not inputs:
        return [], []
    prefix_location, prefix_problem = locate_bucket(prefix, storage)
    if prefix_location is None:
        return [], [Undetermined(step, url, f"{prefix_problem} (the prefix's)") for step, url in inputs]
    locations: dict[str, tuple[str | None, str | None]] = {}
    found, unknown = [], []
    for step, url in inputs:
        bucket = _bucket(url)
        if bucket not in locations:
            locations[bucket] = locate_bucket(url, storage)
        where, problem = locations[bucket]
        if where is None:
            unknown.append(Undetermined(step, url, problem or "unknown"))
        elif where != prefix_location:
            size, size_problem = _size(url, storage)
            found.append(CrossRegionRead(step, url, where, prefix_location, size, size_problem))
    return found, unknown


def same_region(bucket_location_: str, region: str) -> bool:
    """A bucket in `bucket_location_` (GCS location or S3 region) is local to a runner in `region`
    (a multi-region such as GCS's US holds its regions: US-CENTRAL1)."""
    where, here = bucket_location_.upper(), region.upper()
    return here == where or here.startswith(where + "-")


def check_run_region(prefix: str, storage: Storage, environ: Any, allow: bool, events: Any) -> None:
    """Before anything runs: the runner's region (EXECUTOR_REGION, else the cloud's metadata server:
    runner_region.py) against the prefix's bucket location; a mismatch is refused naming both unless
    `allow` (--allow-cross-region). For a local prefix nothing is compared (and nothing asked); with
    no region known, nothing is compared either. Warnings go to `events` (engine/events.py Events)."""
    if not is_object_store(prefix):
        return
    region, source = runner_region(environ)
    if not region:
        return
    where, why = locate_bucket(prefix, storage)
    if where is None:
        events.warning(f"region check: could not tell whether the prefix is in {region} ({source}): {why}")
    elif not same_region(where, region):
        message = (f"this runner is in {region} ({source}) and the prefix {prefix} is in {where}: every "
                   f"read and write would cross regions")
        if not allow:
            raise ExecutorError(f"{message}; nothing was started. Use a prefix in {region}, or pass "
                                f"--allow-cross-region")
        events.warning(f"{message} (allowed by --allow-cross-region)")


def note_cross_region_reads(plan: Plan, prefix: str, storage: Storage, events: Any) -> list[CrossRegionRead]:
    """Emit a CrossRegionNoted event per cross-location read (and per input that could not be
    checked) to `events` (executor.engine.events.Events); returns the reads, for the transfer budget
    (executor.engine.transfers.budget)."""
    reads, unknown = plan.cross_region if plan.cross_region is not None else survey(plan, prefix, storage)
    for read in reads:
        events.emit(CrossRegionNoted(read.step, read.url, read.location, read.prefix_location, read.bytes,
                                     read.size_problem))
    for input_ in unknown:
        events.emit(CrossRegionNoted(input_.step, input_.url, why=input_.why))
    return reads
