"""Loading an experiment file's step graph without running it (for adopt, gc, ids and checks).

The file is executed in this process with `runpy.run_path(..., run_name="__main__")` — exactly as
`python experiments/foo.py` would, so the ids come out identical (classes defined in it are named
by the file, see executor/core/naming.py) — while `executor_main` is temporarily replaced by a function that
parses the experiment's own flags, builds the graph and hands it back instead of running it.
Flags are parsed and steps built *inside* that call, while the file is still `__main__`, so
string annotations in the experiment resolve. An experiment that never reaches `executor_main`
(its call is not under `if __name__ == "__main__":`, or it exits first) is a clear error.
Loading swaps module globals while it runs: one load at a time per process (not thread-safe).
"""

from __future__ import annotations

import runpy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from executor.core.errors import ExecutorError
from executor.core.graph import Graph, build_graph


@dataclass(frozen=True)
class LoadedExperiment:
    path: str  # absolute path of the experiment file
    graph: Graph
    description: str | None

    @property
    def stem(self) -> str:
        return Path(self.path).stem


class _Captured(BaseException):
    """Raised from the stand-in executor_main to unwind the experiment file with its graph."""

    def __init__(self, graph: Graph, description: str | None):
        super().__init__()
        self.graph, self.description = graph, description


def load_experiment(path: str | Path, argv: Sequence[str] = ()) -> LoadedExperiment:
    """Run `path` as __main__ up to its executor_main call and return the graph it declares.

    `argv` are the experiment's own flags (executor flags are accepted and ignored).
    """
    import executor
    import executor.cli as cli

    file = Path(path).resolve()
    if not file.is_file():
        raise ExecutorError(f"experiment file {path} does not exist")

    def capture(steps: Any = None, description: str | None = None, *, config: Any = None,
                argv_: Sequence[str] | None = None, **_: Any) -> None:
        _, user_config = cli.parse_flags(list(argv), config)
        step_list = list(steps(user_config) if callable(steps) else steps or [])
        if not step_list:
            raise ExecutorError(f"{file}: no steps given to executor_main")
        raise _Captured(build_graph(step_list), description)

    saved = (executor.executor_main, cli.executor_main, list(sys.argv), list(sys.path))
    executor.executor_main = cli.executor_main = capture  # type: ignore[assignment]
    sys.argv = [str(file), *argv]
    sys.path.insert(0, str(file.parent))  # as `python experiments/foo.py` would
    try:
        runpy.run_path(str(file), run_name="__main__")
    except _Captured as captured:
        return LoadedExperiment(str(file), captured.graph, captured.description)
    except SystemExit as e:
        raise ExecutorError(f"{file} exited (code {e.code}) before calling executor_main") from None
    finally:
        executor.executor_main, cli.executor_main = saved[0], saved[1]
        sys.argv[:] = saved[2]
        sys.path[:] = saved[3]
    raise ExecutorError(f"{file} never called executor_main(...) when run as __main__; "
                        f"an experiment file ends with `if __name__ == '__main__': executor_main(...)`")
