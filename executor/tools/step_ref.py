"""One way to name a step on the tools' command line: its name, its step id, or its output path.

`hello/shout` (the name: the one output of that name under the prefix), `hello/shout-1a2b3c4d5e6f`
(the step id, which is its folder under the prefix), or a path to the folder or to its
`.executor/status.json`. An ambiguous name lists the step ids to choose from.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from executor.core.errors import ExecutorError
from executor.core.record import EXECUTOR_DIR, status_key
from executor.core.urls import has_scheme
from executor.engine.prefix import outputs
from executor.engine.prefix.prefixes import OpenedPrefix


def strip_status_suffix(ref: str) -> str:
    ref = ref.rstrip("/")
    suffix = f"/{EXECUTOR_DIR}/status.json"
    return ref[: -len(suffix)] if ref.endswith(suffix) else ref


def looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).is_dir()


def given_path(ref: str) -> str | None:
    """The output path `ref` spells out (a URL, a file:// path or a folder), normalized; None when it
    names a step by name or step id, to be looked up under a prefix."""
    ref = strip_status_suffix(ref)
    return outputs.normalize_prefix(ref) if has_scheme(ref) or looks_like_path(ref) else None


def step_path(opened: OpenedPrefix, ref: str) -> str:
    """The output path of the step `ref` names under the opened prefix (see the module docstring)."""
    given = given_path(ref)
    if given is not None:
        return given
    ref = strip_status_suffix(ref)
    from executor.engine.prefix.prefixes import check_outputs

    prefix = opened.url
    store = check_outputs(opened).store  # a missing or empty prefix: the one answer, with the fix
    rel = ref.strip("/")
    if store.read(status_key(rel)) is not None:
        return outputs.join(prefix, rel)
    rels = list(opened.view.list_steps())
    named = [r for r in rels if r.rsplit("-", 1)[0] == rel]
    if len(named) == 1:
        return outputs.join(prefix, named[0])
    if named:
        raise ExecutorError(f"{len(named)} outputs of step {ref!r} under {prefix}: {', '.join(named)}; "
                            f"name one by its step id")
    names = sorted({r.rsplit("-", 1)[0] for r in rels} | set(rels))
    close = difflib.get_close_matches(rel, names, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; steps there: {', '.join(names[:20])}"
    raise ExecutorError(f"no step {ref!r} under {prefix}{hint}")
