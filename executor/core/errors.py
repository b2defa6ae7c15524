"""The executor's exceptions. Everything here is reported to the user without a traceback.

    ExecutorError                  a problem the user can fix; the CLI exits with code 2
    ├── ConfigEncodingError        a config value that cannot be part of an identity
    ├── GraphError                 cycles, unsafe names, two steps claiming one output path
    └── StatusError                a corrupt status, record or run file, or one written by a newer executor
"""

from __future__ import annotations


class ExecutorError(Exception):
    """A problem with the user's experiment, flags or stored state; exit code 2."""


class ConfigEncodingError(ExecutorError, TypeError):
    def __init__(self, step: str | None, field_path: str, value: object, hint: str = ""):
        self.step, self.field_path, self.value = step, field_path, value
        where = f"step {step!r}: " if step else ""
        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        shown = _shown(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(
            f"{where}config field `{field_path or '<config>'}` holds a {type_name} ({shown}), which "
            f"cannot be part of a step's identity. "
            + (hint or "Use None/bool/int/float/str/bytes, lists, tuples, dicts with str keys, "
               "sets, enums, paths or dataclasses; or declare the field execution_only(...) if it "
               "does not change what the step produces.")
        )


class GraphError(ExecutorError):
    pass


class StatusError(ExecutorError):
    """`problem`: what is wrong, without the file's path or how to fix it (for a table's cell)."""

    def __init__(self, message: str, problem: str | None = None):
        super().__init__(message)
        self.problem = problem or message


def _shown(value: object) -> str:
    try:
        return repr(value)
    except ValueError:  # an int with more digits than Python writes out (its size is in the hint)
        return f"an unprintable {type(value).__qualname__}"
