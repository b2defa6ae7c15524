"""Steps and the placeholders configs use to refer to outputs.

An `ExecutorStep` is a name, an importable function and a config; configs point at other steps'
outputs with `output_path_of(step, sub)` and at their own output with `this_output_path(sub)`.
Config fields that change how a step runs but not what it produces are `execution_only(...)`;
credentials are `secret(...)`: neither is hashed, and secrets are never written anywhere.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar


ConfigT = TypeVar("ConfigT")

EXECUTION_ONLY = "stepgraph.execution_only"
SECRET = "stepgraph.secret"
HASHED_UNLESS_DEFAULT = "stepgraph.hashed_unless_default"


def execution_only(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field left out of the step's identity (worker counts, logging cadence...)."""
    return field(default=default, default_factory=default_factory, metadata={EXECUTION_ONLY: True})


def hashed_unless_default(default: Any) -> Any:
    """A hashed field added to a config class whose steps already have outputs: left out of the
    identity while it equals `default` (same type, equal value), hashed like any field otherwise.
    Existing ids keep their value, so `default` must mean exactly what the class did before the
    field existed, and must never change afterwards (that would silently reuse stale outputs).
    `default` is a str, int, float, bool or None."""
    if type(default) not in (str, int, float, bool, type(None)):
        raise TypeError(f"hashed_unless_default({default!r}): the default must be a str, int, float, bool or None, "
                        f"not {type(default).__name__}")
    return field(default=default, metadata={HASHED_UNLESS_DEFAULT: True})


def secret(default: Any = None) -> Any:
    """A credential field: never hashed, never written to records, run files or ids files."""
    return field(default=default, metadata={EXECUTION_ONLY: True, SECRET: True}, repr=False)


def is_execution_only(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get(EXECUTION_ONLY))


def omitted_defaults(cls: type) -> dict[str, Any]:
    """{name: default} of the `hashed_unless_default` fields of a dataclass type."""
    return {f.name: f.default for f in dataclasses.fields(cls) if f.metadata.get(HASHED_UNLESS_DEFAULT)}


def is_secret(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get(SECRET))


@dataclass(frozen=True)
class Resources:
    """What one attempt of a step needs from the cluster. Never part of the identity."""

    cpus: float = 1
    gpus: float = 0
    memory_bytes: int | None = None
    custom: dict[str, float] = field(default_factory=dict)
    hosts: int = 1
    max_infra_retries: int = 3
    retry_user_errors: int = 0
    timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def problem(self) -> str | None:
        """What no runner could honour (a negative retry count, no hosts, a zero timeout), else None."""
        for name, least in (("hosts", 1), ("max_infra_retries", 0), ("retry_user_errors", 0)):
            value = getattr(self, name)
            if not (_is_number(value) and isinstance(value, int) and value >= least):
                return f"resources.{name} must be a whole number >= {least}, got {value!r}"
        for name in ("cpus", "gpus"):
            value = getattr(self, name)
            if not (_is_number(value) and value >= 0):  # NaN fails >= too
                return f"resources.{name} must be a number >= 0, got {value!r}"
        for name, unit in (("memory_bytes", "bytes"), ("timeout_s", "seconds")):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and value > 0):
                return f"resources.{name} must be a number of {unit} > 0, or None for no limit; got {value!r}"
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class OutputPathOf:
    """A placeholder for (a subpath of) another step's output directory."""

    step: "ExecutorStep"
    sub: str | None = None
    blocking: bool = True

    def nonblocking(self) -> "OutputPathOf":
        """Hashed like any dependency, but neither awaited nor pulled in by --only."""
        return dataclasses.replace(self, blocking=False)

    def __truediv__(self, sub: str) -> "OutputPathOf":
        joined = f"{self.sub}/{sub}" if self.sub else sub
        return dataclasses.replace(self, sub=joined)


@dataclass(frozen=True, slots=True)
class ThisOutputPath:
    """A placeholder for (a subpath of) the step's own output directory."""

    sub: str | None = None


@dataclass(frozen=True, slots=True)
class PrefixPath:
    """A fixed path under the prefix that is no step's output (Marin's `InputName.hardcoded`).

    Hashed as the relative path, never the prefix, so the experiment moves between prefixes with
    unchanged ids; resolved to `<prefix>/<path>` before the step runs. Not a dependency: nothing
    waits for it. An absolute or escaping path is refused when the step is hashed (exit 2).
    """

    path: str

    @property
    def problem(self) -> str | None:
        """Why this path cannot name a place under the prefix (None when it can)."""
        p = self.path
        if not isinstance(p, str) or not p.strip("/"):
            return f"prefix_path({p!r}) needs a non-empty relative path, e.g. prefix_path('raw/fineweb')"
        if p.startswith("/") or "://" in p or ".." in p.split("/"):
            return (f"prefix_path({p!r}) must be relative to the prefix, without '..' (e.g. 'raw/fineweb'); "
                    f"for a location outside the prefix pass its full path as a plain string")
        return None


@dataclass(frozen=True, slots=True)
class MirroredPath:
    """A fixed input that may live in any of several buckets (`--mirror-sources`): copied once into
    `<prefix>/mirror/<bucket>/<key>` before a step reading it runs, and resolved to that copy.

    Hashed as the logical URL string itself (exactly as the plain string would be), so ids do not
    depend on which bucket the copy came from. The URL must be `scheme://bucket/key`; anything else
    is refused when the step is hashed (exit 2), naming the step and the field.
    """

    url: str

    @property
    def problem(self) -> str | None:
        """Why this URL cannot name a mirrored input (None when it can)."""
        from executor.core.urls import has_scheme, split_url

        u = self.url
        example = "e.g. mirrored('gs://bucket/raw/corpus')"
        if not isinstance(u, str) or not has_scheme(u) or split_url(u)[0] == "file":
            return f"mirrored({u!r}) needs a bucket URL, scheme://bucket/key ({example})"
        parts = split_url(u)[1].strip("/").split("/")
        if len(parts) < 2 or "" in parts or ".." in parts or "." in parts:
            return f"mirrored({u!r}) needs a bucket and a key without empty, '.' or '..' segments ({example})"
        return None

    @property
    def mirror_rel(self) -> str:
        """Where the copy goes, relative to the prefix: `mirror/<bucket>/<key>`."""
        from executor.core.urls import split_url

        return "mirror/" + split_url(self.url)[1].strip("/")

    @property
    def key(self) -> str:
        """The path inside the bucket, looked up under each mirror source."""
        from executor.core.urls import split_url

        return split_url(self.url)[1].strip("/").split("/", 1)[1]


_TAG_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def split_tag(tag: Any) -> tuple[str, str]:
    """'tokenized/fineweb@2026.12' -> ('tokenized/fineweb', '2026.12'); a ValueError saying the form otherwise."""
    name, at, version = tag.rpartition("@") if isinstance(tag, str) else ("", "", "")
    if not at or not _TAG_VERSION.match(version):
        raise ValueError(f"tag {tag!r} must be NAME@VERSION, e.g. 'tokenized/fineweb@2026.12' (the version: "
                         f"letters, digits and _.+-)")
    validate_name(name, f"tag {tag!r}: its name")
    return name, version


@dataclass(frozen=True, slots=True)
class TaggedOutput:
    """A placeholder for (a subpath of) the output a tag (`name@version`) points at under the prefix.

    Resolved at planning to the tagged step's full digest, which is hashed (with the tag's name) in
    place of the placeholder: moving the tag changes the dependent's id. At run time it is the tagged
    output's path. Not a dependency of the graph: the tagged output already exists.
    """

    tag: str
    sub: str | None = None


def output_of_tag(tag: str, sub: str | None = None) -> TaggedOutput:
    """(A subpath of) the output the tag `name@version` points at (`stepgraph tag`; docs/tags.md)."""
    split_tag(tag)
    return TaggedOutput(tag, None if sub is None else _check_sub(sub))


def mirrored(url: str) -> MirroredPath:
    """A fixed input (`gs://bucket/raw/corpus`) that `--mirror-sources` may hold copies of: the step
    reads a checked local copy under the prefix; its id depends on `url` only."""
    return MirroredPath(url)  # as written: its id is this string's


def prefix_path(path: str) -> PrefixPath:
    """`<prefix>/<path>`: an input under the prefix that no step of this graph writes."""
    return PrefixPath(path.strip("/") if isinstance(path, str) and not path.startswith("/") else path)


def output_path_of(step: "ExecutorStep", sub: str | None = None) -> OutputPathOf:
    if not isinstance(step, ExecutorStep):
        raise TypeError(f"output_path_of() takes an ExecutorStep, got {type(step).__name__}: {step!r}")
    # Experiments make tens of thousands of these while declaring their steps: the placeholders
    # are slotted (no per-instance dict: less memory, fewer objects for the collector to track),
    # and the whole output's is made once per step and held by it (frozen: any number of configs
    # can share it), so a step read by three others is one placeholder, not three
    if sub is not None:
        return OutputPathOf(step, _check_sub(sub))
    shared = step._whole_output
    if shared is None or shared.step is not step:  # not made yet, or copied along by copy.copy(step)
        shared = OutputPathOf(step)
        object.__setattr__(step, "_whole_output", shared)
    return shared


def this_output_path(sub: str | None = None) -> ThisOutputPath:
    return _THIS_OUTPUT if sub is None else ThisOutputPath(_check_sub(sub))


_THIS_OUTPUT = ThisOutputPath()  # frozen, so one instance serves every step's own output


def _check_sub(sub: str | None) -> str | None:
    if sub is None:
        return None
    if not isinstance(sub, str) or sub.startswith("/") or ".." in sub.split("/"):
        raise ValueError(f"output subpath {sub!r} must be a relative path without '..'")
    return sub.strip("/") or None


_NAME_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")


# The whole rule below in one expression, for the common case of a valid name (10,000 steps are
# declared in a fraction of a second): segments start with a letter or digit, so none is '.' or '..'.
_VALID_NAME = re.compile(r"(?!runs(?:/|$))[A-Za-z0-9][A-Za-z0-9_.=+-]*(?:/[A-Za-z0-9][A-Za-z0-9_.=+-]*)*")


def validate_name(name: Any, what: str = "step name") -> str:
    """Names become paths under the prefix: safe characters, no escape, no reserved prefixes."""
    if type(name) is str and _VALID_NAME.fullmatch(name):
        return name
    hint = "use '/'-separated segments of letters, digits and _.=+- (e.g. 'tokenized/shakespeare')"
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} {name!r} is empty or not a string; {hint}")
    if name.startswith("/") or name.startswith("."):
        raise ValueError(f"{what} {name!r} may not start with '/' or '.'; {hint}")
    if name == "runs" or name.startswith("runs/"):
        raise ValueError(f"{what} {name!r}: 'runs/' is reserved for run records; pick another name")
    for segment in name.split("/"):
        if segment in ("", ".", "..") or not _NAME_SEGMENT.fullmatch(segment):
            raise ValueError(f"{what} {name!r} has an unsafe segment {segment!r}; {hint}")
    return name


_importable_functions: set[Any] = set()  # functions already checked (steps share a few functions)


def check_step_function(step_name: str, fn: Any) -> None:
    """Step functions must be importable (`module:qualname`) so workers and records can name them."""
    try:
        if fn in _importable_functions:
            return
    except TypeError:  # an unhashable callable object
        pass
    _check_step_function(step_name, fn)
    try:
        _importable_functions.add(fn)
    except TypeError:
        pass


def _check_step_function(step_name: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"step {step_name!r}: fn must be a function, got {type(fn).__name__}: {fn!r}")
    qualname = getattr(fn, "__qualname__", "")
    if getattr(fn, "__name__", "") == "<lambda>" or "<locals>" in qualname:
        raise ValueError(
            f"step {step_name!r}: fn {qualname or fn!r} is a lambda or a function defined inside another "
            f"function; step functions must be importable by module:qualname. Define it at module level.")


@dataclass(frozen=True, eq=False)
class ExecutorStep(Generic[ConfigT]):
    """One node of the graph. Identity comes from name, config and code_version (see identity.py)."""

    name: str
    fn: Callable[[ConfigT], Any]
    config: ConfigT
    resources: Resources | None = None
    code_version: str | None = None
    description: str | None = None
    override_output_path: str | None = None

    def __post_init__(self) -> None:
        # The name and override_output_path are checked when the graph is built (graph.py: a GraphError),
        # not here: steps are often declared at import time, where an exception is a traceback and exit 1
        # instead of the usage error (exit 2) the docs promise.
        check_step_function(self.name, self.fn)
        if self.code_version is not None and not isinstance(self.code_version, str):
            raise TypeError(f"step {self.name!r}: code_version must be a string, got {self.code_version!r}")
        problem = self.resources.problem if self.resources is not None else None
        if problem:
            raise ValueError(f"step {self.name!r}: {problem}")

    # output_path_of(self), made on first use (a class attribute, not a field: not part of the step's
    # value, its repr or its identity)
    _whole_output = None

    def __repr__(self) -> str:
        return f"ExecutorStep({self.name!r})"

    # Steps are compared by identity of the object; graph.py collapses identical declarations
    # by digest, so two equal configs declared twice become one node.
    __hash__ = object.__hash__

    def cd(self, sub: str) -> OutputPathOf:
        """Shorthand for output_path_of(self, sub)."""
        return output_path_of(self, sub)
