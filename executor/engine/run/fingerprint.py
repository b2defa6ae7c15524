"""Code fingerprints: a step function plus the code it reaches in the user's own modules.

A fingerprint maps the qualified name (`helpers.transform`; the experiment script by its file's
stem) of each function, class and module-level constant a step function reaches - through its
globals and closure, module attributes (`helpers.transform`) and `from helpers import transform`,
transitively - to a digest of its syntax tree without docstrings (`ast.dump` without positions,
so comments, layout and line numbers change nothing), plus one combined digest over the digests
alone (moving a function between modules leaves it alone). "The user's own modules" are `.py`
files outside the interpreter's installation (sys.prefix, sys.base_prefix and the exec prefixes),
outside every site-packages or dist-packages directory and outside the executor's own package:
installed packages are provenance through the lock file. Source is read from disk as it is when
the fingerprint is taken; fingerprints and parsed files are cached per function and per (path,
mtime_ns, size, inode) of every file read, checked on each use, so a long-lived process never
serves a stale fingerprint (a file modified in the last two seconds is never cached at all).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
import threading
import time
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

SCHEMA = 1
RACY_NS = 2_000_000_000  # a file modified this recently may change again within its mtime's granularity
_MAX_FILES = 1024


@dataclass(frozen=True)
class Fingerprint:
    """{qualified name -> digest} of the code a step reaches, and one digest over them all."""

    digest: str
    functions: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "digest": self.digest, "functions": dict(sorted(self.functions.items()))}

    @classmethod
    def from_json(cls, data: Any) -> "Fingerprint | None":
        """The fingerprint a record holds; None for anything else (an older or foreign shape)."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("digest"), str):
            return None
        functions = data.get("functions")
        return cls(data["digest"], dict(functions) if isinstance(functions, dict) else {})


def combine(functions: Mapping[str, str]) -> str:
    return hashlib.sha256("\n".join(sorted(functions.values())).encode()).hexdigest()


# -- which files are the user's own -----------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """Directories whose modules are installed code (interpreter facts, fixed for the process)."""
    import site

    import executor  # the executor's own package, wherever this module sits in it

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(executor.__file__).resolve().parent)}
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except AttributeError:  # some embedded interpreters have no site helpers
        pass
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


@functools.lru_cache(maxsize=4096)
def is_user_file(path: str) -> bool:
    """A `.py` file of the user's own (see the module docstring); a pure function of the path."""
    if not path or not path.endswith(".py") or path.startswith("<"):
        return False
    real = os.path.realpath(path)
    parts = Path(real).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not real.startswith(_installed_roots())


# -- parsed files, cached per file state -------------------------------------------------------------

@dataclass(frozen=True)
class _Parsed:
    defs: dict[str, list[ast.AST]]  # qualname -> FunctionDef/AsyncFunctionDef/ClassDef nodes, in order
    assigns: dict[str, list[ast.stmt]]  # module-level name -> the statements binding it
    imports: dict[str, tuple[str | None, str, int]]  # name -> (module, original name, level) of `from m import`
    digests: dict[tuple, str] = field(default_factory=dict)  # node_digest of these nodes, once per parse

    def digest(self, kind: str, nodes: list[ast.AST]) -> str:
        key = (kind, *map(id, nodes))
        found = self.digests.get(key)
        if found is None:
            found = self.digests[key] = node_digest(kind, nodes)
        return found


_FileState = tuple[int, int, int]
_lock = threading.Lock()
_files: dict[str, tuple[_FileState, _Parsed]] = {}
_fingerprints: "weakref.WeakKeyDictionary[Callable, tuple[tuple[tuple[str, _FileState], ...], Fingerprint]]" = (
    weakref.WeakKeyDictionary())


def _state(path: str) -> _FileState | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _racy(state: _FileState) -> bool:
    return time.time_ns() - state[0] < RACY_NS


def _parse(path: str, state: _FileState) -> _Parsed | None:
    with _lock:
        cached = _files.get(path)
    if cached is not None and cached[0] == state:
        return cached[1]
    try:
        tree = ast.parse(Path(path).read_bytes(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    parsed = _index(tree)
    if not _racy(state):
        with _lock:
            if len(_files) >= _MAX_FILES:
                _files.pop(next(iter(_files)))
            _files[path] = (state, parsed)
    return parsed


def _index(tree: ast.Module) -> _Parsed:
    defs: dict[str, list[ast.AST]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = prefix + node.name
                defs.setdefault(qualname, []).append(node)
                inner = qualname + (".<locals>." if not isinstance(node, ast.ClassDef) else ".")
                walk(node.body, inner)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for block in _blocks(node):
                    walk(block, prefix)

    walk(tree.body, "")
    assigns: dict[str, list[ast.stmt]] = {}
    imports: dict[str, tuple[str | None, str, int]] = {}
    for stmt in _module_statements(tree.body):
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                imports[alias.asname or alias.name] = (stmt.module, alias.name, stmt.level)
        for name in _bound_names(stmt):
            assigns.setdefault(name, []).append(stmt)
    return _Parsed(defs, assigns, imports)


def _blocks(node: ast.stmt) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        yield getattr(node, name, None) or []
    for handler in getattr(node, "handlers", None) or []:
        yield handler.body


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, including those inside module-level if/try/with blocks."""
    for stmt in body:
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for block in _blocks(stmt):
                yield from _module_statements(block)
        else:
            yield stmt


def _bound_names(stmt: ast.stmt) -> list[str]:
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


# -- the normalised form ----------------------------------------------------------------------------

_DOC_OWNERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _dump(node: Any) -> str:
    """ast.dump's form without positions (include_attributes=False), docstrings left out: a body that
    was only a docstring reads as `pass`. No copy of the tree is made."""
    if isinstance(node, ast.AST):
        parts = []
        for name, value in ast.iter_fields(node):
            if name == "body" and isinstance(node, _DOC_OWNERS) and value and _is_docstring(value[0]):
                value = value[1:] or [ast.Pass()]
            parts.append(f"{name}={_dump(value)}")
        return f"{type(node).__name__}({', '.join(parts)})"
    if isinstance(node, list):
        return "[" + ", ".join(_dump(v) for v in node) + "]"
    return repr(node)


def node_digest(kind: str, nodes: list[ast.AST]) -> str:
    """sha256 of the nodes' syntax trees without docstrings, comments, layout or positions."""
    dumped = "\n".join(_dump(n) for n in nodes)
    return hashlib.sha256(f"{kind}\0{dumped}".encode()).hexdigest()


# -- the walk over reached code ---------------------------------------------------------------------

_MISSING = object()


def _unwrap(obj: Any) -> Any:
    """The plain function behind a partial, a bound method, a static/class method or a decorator
    that kept `__wrapped__` (a few hops at most)."""
    for _ in range(8):
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, (types.MethodType, staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, types.FunctionType) and hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        else:
            return obj
    return obj


def _display(module: str | None, qualname: str, path: str) -> str:
    """`helpers.transform`; a script run as __main__ goes by its file's stem (`hello.write_text`)."""
    if not module or module.startswith("__main__") or module.startswith("<"):
        module = Path(path).stem
    return f"{module}.{qualname}"


def _find(nodes: list[ast.AST] | None, first_line: int | None) -> ast.AST | None:
    """Of the definitions with one qualname, the one starting at `first_line`, else the last (the
    one a module binds)."""
    if not nodes:
        return None
    for node in nodes:
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        if start == first_line:
            return node
    return nodes[-1]


def _chains(node: ast.AST) -> set[tuple[str, ...]]:
    """Every name a node reads, and every attribute chain over one (`helpers.transform`)."""
    chains: set[tuple[str, ...]] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            chains.add((n.id,))
        elif isinstance(n, ast.Attribute):
            parts, base = [n.attr], n.value
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                chains.add((base.id, *reversed(parts)))
    return chains


class _Walk:
    """One fingerprint's walk: what it reached, and the state of every file it read."""

    def __init__(self) -> None:
        self.functions: dict[str, str] = {}
        self.files: dict[str, _FileState] = {}
        self.seen: set[Any] = set()
        self.racy = False
        self.pending: list[tuple[Callable[..., None], tuple]] = []

    def run(self, fn: types.FunctionType) -> None:
        self.function(fn, entry=True)
        while self.pending:
            handler, args = self.pending.pop()
            handler(*args)

    def file(self, path: str) -> _Parsed | None:
        state = self.files.get(path) or _state(path)  # one stat per file per walk
        if state is None:
            return None
        self.files[path] = state
        self.racy = self.racy or _racy(state)
        return _parse(path, state)

    def function(self, fn: types.FunctionType, entry: bool = False) -> None:
        code = fn.__code__
        if ("f", code) in self.seen or not (entry or is_user_file(code.co_filename)):
            return
        self.seen.add(("f", code))
        parsed = self.file(code.co_filename)
        node = _find(parsed.defs.get(fn.__qualname__) if parsed else None, code.co_firstlineno)
        if node is None:
            return
        self.functions[_display(fn.__module__, fn.__qualname__, code.co_filename)] = parsed.digest("function", [node])
        closure = {}
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                closure[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        self.references(node, fn.__globals__, closure)

    def klass(self, cls: type, referenced_from: Mapping[str, Any]) -> None:
        if ("c", cls) in self.seen:
            return
        self.seen.add(("c", cls))
        namespace = (referenced_from if referenced_from.get("__name__") == cls.__module__  # a script run as __main__
                     else getattr(sys.modules.get(cls.__module__), "__dict__", {}))
        path = namespace.get("__file__")
        for value in vars(cls).values():  # a method's file and globals: the module that defined the class
            method = _unwrap(value)
            if isinstance(method, types.FunctionType) and method.__code__.co_filename.endswith(".py"):
                path, namespace = method.__code__.co_filename, method.__globals__
                break
        if not path or not is_user_file(path):
            return
        parsed = self.file(path)
        node = _find(parsed.defs.get(cls.__qualname__) if parsed else None, None)
        if node is None:
            return
        self.functions[_display(cls.__module__, cls.__qualname__, path)] = parsed.digest("class", [node])
        self.references(node, namespace, {})

    def constant(self, namespace: Mapping[str, Any], name: str) -> None:
        """A module-level name bound to a value: the statements that bind it in the user's module."""
        path = namespace.get("__file__")
        if not isinstance(path, str) or ("k", path, name) in self.seen or not is_user_file(path):
            return
        self.seen.add(("k", path, name))
        parsed = self.file(path)
        if parsed is None:
            return
        statements = parsed.assigns.get(name)
        if statements:
            self.functions[_display(namespace.get("__name__"), name, path)] = parsed.digest("constant", statements)
            for statement in statements:
                self.references(statement, namespace, {})
            return
        imported = parsed.imports.get(name)  # `from settings import LIMIT`: where it is bound
        if imported is not None:
            module = _imported_module(imported, namespace.get("__package__"))
            if module is not None:
                self.pending.append((self.constant, (module.__dict__, imported[1])))

    def references(self, node: ast.AST, namespace: Mapping[str, Any], closure: Mapping[str, Any]) -> None:
        for chain in sorted(_chains(node)):
            value = closure.get(chain[0], _MISSING)
            if value is _MISSING:
                value = namespace.get(chain[0], _MISSING)
            if value is not _MISSING:
                self.pending.append((self.value, (value, chain[1:], namespace, chain[0])))

    def value(self, obj: Any, rest: tuple[str, ...], namespace: Mapping[str, Any], name: str) -> None:
        obj = _unwrap(obj)
        if isinstance(obj, types.ModuleType):
            if rest and is_user_file(getattr(obj, "__file__", None) or ""):
                attr = getattr(obj, rest[0], _MISSING)
                if attr is not _MISSING:
                    self.value(attr, rest[1:], obj.__dict__, rest[0])
        elif isinstance(obj, types.FunctionType):
            self.function(obj)
        elif isinstance(obj, type):
            self.klass(obj, namespace)
        else:
            self.constant(namespace, name)


def _imported_module(imported: tuple[str | None, str, int], package: str | None) -> types.ModuleType | None:
    module, _, level = imported
    if level:
        base = (package or "").rsplit(".", level - 1)[0] if level > 1 else (package or "")
        module = f"{base}.{module}" if module and base else (module or base)
    found = sys.modules.get(module or "")
    return found if found is not None and is_user_file(getattr(found, "__file__", None) or "") else None


def code_fingerprint(fn: Any) -> Fingerprint | None:
    """The fingerprint of the code `fn` reaches; None where its source cannot be found (a lambda,
    a builtin, a function typed into a REPL)."""
    target = _unwrap(fn)
    if not isinstance(target, types.FunctionType):
        return None
    with _lock:
        cached = _fingerprints.get(target)
    if cached is not None and all(_state(path) == state for path, state in cached[0]):
        return cached[1]
    walk = _Walk()
    walk.run(target)
    if not walk.functions:
        return None
    fingerprint = Fingerprint(combine(walk.functions), walk.functions)
    if not walk.racy:
        with _lock:
            _fingerprints[target] = (tuple(walk.files.items()), fingerprint)
    return fingerprint


def status_digest(fn: Any) -> str | None:
    """What a SUCCESS status carries (`function_sha256`): the combined digest, or for code with no
    fingerprint (a lambda) the sha256 of its source, as statuses before fingerprints held."""
    fingerprint = code_fingerprint(fn)
    if fingerprint is not None:
        return fingerprint.digest
    from executor.engine.run.provenance import function_fingerprint

    return function_fingerprint(fn)


def record_fingerprint(fn: Any) -> dict[str, Any] | None:
    """What a record's provenance carries (`code_fingerprint`): every reached name's digest."""
    fingerprint = code_fingerprint(fn)
    return fingerprint.to_json() if fingerprint is not None else None
