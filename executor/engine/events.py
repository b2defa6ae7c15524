"""What a plan or a run reports as it goes: typed events, delivered to subscribers in order.

The library prints nothing: `executor.plan`/`run`/`materialize` emit these to the subscribers their
caller gives (none from a notebook: nothing is printed); the dry run, `--check` and `--explain`
(executor/tools/dry_run.py, plan_file.py, explain.py) report through them too. The command line
subscribes its console view (tools/console_view.py, rendering with tools/console_reporter.py); a run
subscribes its own run-file writer (engine/run/run_file.py). Events carry data, never console markup:
every text field is plain text (a step's name, an error, a path), and a renderer styles and escapes it.
A subscriber is any callable taking an event; one that raises fails what the run was doing when it
emitted (a step's start, say), as any other error there would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from executor.core.graph import Graph, StepNode
from executor.core.outcome import Outcome
from executor.core.plan import Plan
from executor.core.record import Status


@dataclass(frozen=True)
class PlanMade:
    """A plan, before anything runs; `fs`, `storage_options` and `store` are where it was read (never
    shown): the prefix as the run opened it, which a subscriber reuses instead of opening it again."""

    graph: Graph = field(repr=False)
    plan: Plan = field(repr=False)
    prefix: str
    description: Optional[str] = None
    fs: Any = field(default=None, repr=False, compare=False)
    storage_options: dict = field(default_factory=dict, repr=False, compare=False)
    dry_run: bool = False  # a dry run's plan (tools/dry_run.py): nothing runs after it
    store: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class RunStarted:
    """Steps are about to run: the run's id and where its run file is."""

    run_id: str
    run_file: str


@dataclass(frozen=True)
class StepStarted:
    node: StepNode = field(repr=False)
    attempt: int
    takeover: bool  # took over another runner's stale lease
    output_path: str

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class StepWaiting:
    """Another runner holds the step's lease; `first` on the first notice, later ones repeat it."""

    node: StepNode = field(repr=False)
    status: Status = field(repr=False)
    silent_s: float
    ttl_s: float
    first: bool = True

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class StepRetried:
    """The step's own code failed and its resources allow another try."""

    node: StepNode = field(repr=False)
    error: str

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class LeaseLost:
    """The step's lease was lost: its task was cancelled, nothing committed; it is pending again."""

    node: StepNode = field(repr=False)
    reason: str

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class StepFinished:
    """A step ended in this run: SUCCEEDED (here, or `elsewhere` by another runner), FAILED or BLOCKED."""

    node: StepNode = field(repr=False)
    outcome: Outcome
    seconds: Optional[float] = None  # ran here: from start to commit
    result: Any = field(default=None, repr=False)  # what it returned, as stored
    error: Optional[str] = None
    traceback_tail: Optional[str] = field(default=None, repr=False)
    elsewhere: bool = False  # its status was written by another runner
    dependency: Optional[str] = None  # BLOCKED: the dependency that failed
    cut_off: Optional[str] = None  # SUCCEEDED without running: why (executor.engine.run.cutoff), e.g. "cut off: …"

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class MirrorCopied:
    """One mirrored input this run needed (executor.engine.transfers.mirror_copy), once settled: `how` is "copied"
    (here, from `source`: bytes, files, seconds), "already complete" (under the prefix before this run
    looked), "copied by another runner" (while this run waited) or "failed" (`error`)."""

    logical: str  # the URL as written in mirrored(...)
    path: str  # mirror/<bucket>/<key>, relative to the prefix
    how: str
    source: Optional[str] = None
    bytes: Optional[int] = None
    files: Optional[int] = None
    seconds: Optional[float] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class LogLine:
    """A note (`info`), a `warning` or an `error` of the call itself, as plain text (never markup)."""

    level: str  # info | warning | error
    text: str


@dataclass(frozen=True)
class CrossRegionNoted:
    """A step reads an input from another location than the prefix's (`location`, `bytes` or
    `size_problem`), or the check could not tell whether it does (`why`): executor.engine.transfers.regions."""

    step: str
    url: str
    location: Optional[str] = None
    prefix_location: Optional[str] = None
    bytes: Optional[int] = None
    size_problem: Optional[str] = None
    why: Optional[str] = None  # set: the check could not tell


@dataclass(frozen=True)
class DriftFound:
    """A completed step whose code changed since its output was made (executor.tools.drift): `what`
    names the changed code; `message` says what that means and the ways out, as plain text."""

    step: str
    step_id: str
    what: str
    message: str


@dataclass(frozen=True)
class ChangeNoted:
    """A step that runs because its id is new: what changed since its nearest earlier version."""

    step: str
    note: str


@dataclass(frozen=True)
class ShardsForecast:
    """The dry run's forecast for incremental data steps (issue 48): per step name, what it expects to
    reuse ("expects to reuse 14 of 16 shards (2 to process)") or why it cannot tell."""

    lines: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class StandbyNoted:
    """--cache-from: steps neither run nor copied, since every step reading them is copied or complete."""

    steps: tuple[str, ...]


@dataclass(frozen=True)
class MirrorPlanned:
    """A mirrored input a run would need (executor.engine.transfers.mirror): `complete` under the prefix,
    `waiting` for another runner's copy, or to be copied from `source` (`bytes`, `files`; `also`:
    other places holding it)."""

    logical: str
    path: str
    complete: bool = False
    waiting: bool = False
    source: Optional[str] = None
    bytes: Optional[int] = None
    files: Optional[int] = None
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class TransferRefusal:
    """A dry run's finding: the run it plans would be refused before anything runs, and why."""

    reason: str


@dataclass(frozen=True)
class IdsChecked:
    """`--check`: the step ids against the committed ids file `path` (`changes`: one plain line each)."""

    path: str
    steps: int
    changed: int = 0
    added: int = 0
    removed: int = 0
    changes: tuple[str, ...] = ()
    fix: str = ""

    @property
    def ok(self) -> bool:
        return not (self.changed or self.added or self.removed)


@dataclass(frozen=True)
class IdsWritten:
    """`--update-plan`: the ids file `path` was rewritten, or already `up_to_date`."""

    path: str
    steps: int
    up_to_date: bool = False


@dataclass(frozen=True)
class ExperimentChecked:
    """`stepgraph check`: one experiment file's ids checked (its `--check` process, and the ids recomputed
    under a second hash seed); `lines`: what those said, plain. `exit_code` None: the file has no ids file
    (`ids_file`), so it was not checked."""

    file: str
    exit_code: Optional[int]
    lines: tuple[str, ...] = ()
    ids_file: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code in (None, 0)


@dataclass(frozen=True)
class ExperimentsChecked:
    """`stepgraph check`: the end: how many experiment files were checked and which did not pass."""

    checked: int
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepExplained:
    """`--explain`: why one step has its id, as plain lines (what changed, through which dependency)."""

    step: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class RunFinished:
    """The run's result (executor.api.RunResult), the last event of a run."""

    result: Any = field(repr=False)
    seconds: float = 0.0


Event = (PlanMade | RunStarted | StepStarted | StepWaiting | StepRetried | LeaseLost | StepFinished | MirrorCopied
         | LogLine | CrossRegionNoted | DriftFound | ChangeNoted | ShardsForecast | StandbyNoted | MirrorPlanned | TransferRefusal
         | IdsChecked | IdsWritten | ExperimentChecked | ExperimentsChecked | StepExplained | RunFinished)
Subscriber = Callable[[Event], None]


class Events:
    """The subscribers of one call, in the order given; `emit` delivers an event to each in turn."""

    def __init__(self, subscribers: Iterable[Subscriber] = ()):
        self.subscribers: list[Subscriber] = list(subscribers)

    def emit(self, event: Event) -> None:
        for subscriber in self.subscribers:
            subscriber(event)

    def info(self, text: str) -> None:
        self.emit(LogLine("info", text))

    def warning(self, text: str) -> None:
        self.emit(LogLine("warning", text))

    def error(self, text: str) -> None:
        self.emit(LogLine("error", text))


__all__ = ["ChangeNoted", "CrossRegionNoted", "DriftFound", "Event", "Events", "ExperimentChecked",
           "ExperimentsChecked", "IdsChecked", "IdsWritten", "LeaseLost",
           "LogLine", "MirrorCopied", "MirrorPlanned", "PlanMade", "RunFinished", "RunStarted", "ShardsForecast", "StandbyNoted",
           "StepExplained", "StepFinished", "StepRetried", "StepStarted", "StepWaiting", "Subscriber",
           "TransferRefusal"]
