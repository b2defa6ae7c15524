"""Loading an experiment file's step graph without running it (for adopt, gc, ids and checks).

The file is executed in this process as a module of its own, from its file location, under a
fresh private name (`__stepgraph_script__.<n>.<stem>`), so nothing already imported is replaced
and nothing of the process is swapped: not `__main__`, not `sys.argv`, not `executor_main`. Its
`if __name__ == "__main__":` test is read as true (only that comparison; `__name__` itself is the
private name), so the file goes where `python experiments/foo.py` would go: to its
`executor_main(...)` call. That call sees the loader of this context (a contextvar, set per call
to `load_experiment`, see executor/cli.py) and, instead of running, parses the experiment's own
flags, builds the graph and hands it back. Flags are parsed and steps built inside that call,
while the module is registered, so string annotations in the experiment resolve; its classes are
named by the file as when it runs as a script (executor/core/naming.py), so the ids come out
identical. Loads on several threads at once are independent; the cyclic garbage collector is
paused while a file declares its steps (core/gc_pause.py: counted, so loads on several threads
share one pause). The file's folder is on `sys.path` while the file loads (as a script's folder is
on its path: its own imports resolve), and taken off again when the last load that put it there
ends; a folder already on the path stays. An experiment that never reaches `executor_main` (its
call is not under `if __name__ == "__main__":`, or it exits first) is a clear error.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from executor.core.errors import ExecutorError
from executor.core.gc_pause import gc_paused
from executor.core.graph import Graph, build_graph
from executor.core.naming import LOADED_SCRIPT_PREFIX

_numbers = itertools.count(1)  # each load's own module name (next() is atomic)
_path_lock = threading.Lock()
_loads_on_path: dict[str, int] = {}  # folder this module put on sys.path -> loads still using it


@contextlib.contextmanager
def _folder_on_path(folder: str) -> Iterator[None]:
    """`folder` on sys.path for the block; taken off after the last block that added it (loads on
    other threads may overlap). A folder that was on the path already is left as it is."""
    with _path_lock:
        ours = folder in _loads_on_path or folder not in sys.path
        if ours:
            if folder not in sys.path:
                sys.path.append(folder)
            _loads_on_path[folder] = _loads_on_path.get(folder, 0) + 1
    try:
        yield
    finally:
        if ours:
            with _path_lock:
                _loads_on_path[folder] -= 1
                if not _loads_on_path[folder]:
                    del _loads_on_path[folder]
                    if folder in sys.path:
                        sys.path.remove(folder)


@dataclass(frozen=True)
class LoadedExperiment:
    path: str  # absolute path of the experiment file
    graph: Graph
    description: str | None

    @property
    def stem(self) -> str:
        return Path(self.path).stem


class _Captured(BaseException):
    """Raised from executor_main, under this load's loader, to unwind the file with its graph."""

    def __init__(self, graph: Graph, description: str | None):
        super().__init__()
        self.graph, self.description = graph, description


class _MainTestIsTrue(ast.NodeTransformer):
    """`__name__ == "__main__"` (either way round) -> True; nothing else changes (line numbers kept)."""

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            sides = {_spelled(node.left), _spelled(node.comparators[0])}
            if sides == {"name", "main"}:
                return ast.copy_location(ast.Constant(True), node)
        return node


def _spelled(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name) and node.id == "__name__":
        return "name"
    return "main" if isinstance(node, ast.Constant) and node.value == "__main__" else None


def _compiled(file: Path) -> types.CodeType:
    tree = _MainTestIsTrue().visit(ast.parse(file.read_bytes(), str(file)))
    return compile(ast.fix_missing_locations(tree), str(file), "exec", dont_inherit=True)


def load_experiment(path: str | Path, argv: Sequence[str] = (), tags: Any = None) -> LoadedExperiment:
    """Run `path` up to its executor_main call and return the graph it declares.

    `argv` are the experiment's own flags (executor flags are accepted and ignored); `tags` resolves
    output_of_tag(...) placeholders (executor.tools.tags.tag_lookup; without it a step reading a tag
    cannot be hashed).
    """
    import executor.cli as cli

    file = Path(path).resolve()
    if not file.is_file():
        raise ExecutorError(f"experiment file {path} does not exist")

    def capture(steps: Any = None, description: str | None = None, *, config: Any = None, **_: Any) -> None:
        _, user_config = cli.parse_flags(list(argv), config)
        step_list = list(steps(user_config) if callable(steps) else steps or [])
        if not step_list:
            raise ExecutorError(f"{file}: no steps given to executor_main")
        raise _Captured(build_graph(step_list, tags), description)

    code = _compiled(file)
    name = f"{LOADED_SCRIPT_PREFIX}{next(_numbers)}.{file.stem}"
    module = types.ModuleType(name)
    module.__file__ = str(file)
    token = cli.LOADER.set(capture)
    sys.modules[name] = module  # a name of its own: string annotations resolve while the file loads
    try:
        # its own imports resolve, as under `python experiments/foo.py`; the collector paused while it
        # declares its steps (100,000 steps: 1.5 s of collections otherwise)
        with _folder_on_path(str(file.parent)), gc_paused():
            exec(code, module.__dict__)
    except _Captured as captured:
        return LoadedExperiment(str(file), captured.graph, captured.description)
    except SystemExit as e:
        raise ExecutorError(f"{file} exited (code {e.code}) before calling executor_main") from None
    finally:
        cli.LOADER.reset(token)
        sys.modules.pop(name, None)
    raise ExecutorError(f"{file} never called executor_main(...) when run as __main__; "
                        f"an experiment file ends with `if __name__ == '__main__': executor_main(...)`")
