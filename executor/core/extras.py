"""The optional parts of stepgraph and the extra that installs each: a missing one is an error naming it.

The core (`pip install stepgraph`) runs experiments such as experiments/hello.py; the step library
and some tools need more: `[data]` (numpy, pyarrow, tokenizers, ...), `[train]` (JAX, optax),
`[serve]` (jinja2, for `stepgraph serve`), `[draw]` (matplotlib, for `.png` plans), `[all]`.
Such imports are made where the feature is used, after `require_extra` has checked for them
(importlib.util.find_spec: nothing is imported by the check itself).
"""

from __future__ import annotations

import importlib.util

from executor.core.errors import ExecutorError


class MissingExtra(ExecutorError, ModuleNotFoundError):
    """A feature needs a package that is not installed; the message names the extra installing it.
    An ImportError too, so code that tries an import and falls back still can."""

    def __init__(self, what: str, extra: str, missing: list[str]):
        super().__init__(f"{what} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
                         f"installed: pip install 'stepgraph[{extra}]' (from a checkout: uv sync, which installs "
                         f"every extra)")
        self.name = missing[0]  # ModuleNotFoundError's field: the (first) missing module
        self.what, self.extra, self.missing = what, extra, missing


def require_extra(extra: str, what: str, *modules: str) -> None:
    """MissingExtra naming `extra` when any of `modules` (top-level names) cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(what, extra, missing)
