"""Provenance: git state, user, host, versions, command line, function fingerprints.

This is the only module that reads the process environment for provenance; everything it finds
is recorded, never hashed into identities.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
import re
import sys
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from executor.engine.prefix import location

KEY_PACKAGES = ("stepgraph", "ray", "jax", "jaxlib", "optax", "numpy", "fsspec", "gcsfs", "s3fs",
                "tokenizers", "draccus", "pyarrow")


# subprocess, importlib.metadata, socket, getpass and platform are imported where used: only a run
# that executes steps records provenance, and importing them is ~40 ms of every no-op re-run.


def _git(args: list[str], cwd: Path) -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode(errors="replace").strip()


def git_state(directory: str) -> dict[str, Any]:
    """Commit, dirty flag and a hash of the uncommitted diff of the repository holding `directory`,
    read afresh on every call (three git commands, ~25 ms): a process that runs for days (a
    notebook, `stepgraph serve`) records each run's own state, never a cached earlier one. An edit
    to a tracked file changes neither git's index nor HEAD, so no cheap key could tell a cache that
    it went stale."""
    cwd = Path(directory)
    commit = _git(["rev-parse", "HEAD"], cwd)
    if commit is None:
        return {"commit": None, "dirty": None, "diff_sha256": None}
    diff = _git(["diff", "HEAD"], cwd) or ""
    untracked = _git(["ls-files", "--others", "--exclude-standard"], cwd) or ""
    dirty = bool(diff or untracked)
    digest = hashlib.sha256((diff + "\n" + untracked).encode()).hexdigest() if dirty else None
    return {"commit": commit, "dirty": dirty, "diff_sha256": digest}


def _find_upwards(start: Path, name: str) -> Path | None:
    for directory in [start, *start.parents]:
        if (directory / name).exists():
            return directory / name
    return None


def lockfile_sha256(directory: str) -> str | None:
    """sha256 of the uv.lock above `directory`, hashed on every call (~1 ms for 1.3 MB): uncached,
    so a lock file updated between two runs of one process is recorded as it is now."""
    lock = _find_upwards(Path(directory), "uv.lock")
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock else None


def package_versions() -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def function_reference(fn: Callable, main_file: str | None) -> str:
    """`module:qualname`; for functions in the experiment script, the script's path instead."""
    module = getattr(fn, "__module__", None) or "?"
    if module == "__main__" and main_file:
        module = main_file
    return f"{module}:{getattr(fn, '__qualname__', repr(fn))}"


@lru_cache(maxsize=4096)
def function_fingerprint(fn: Callable) -> str | None:
    """sha256 of the function's source, or None where the source is not available."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()


def user_and_host() -> dict[str, Any]:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    return {"user": user, "host": socket.gethostname(), "pid": os.getpid()}


REDACTED = "***"
SECRET_LOOKING = re.compile(r"token|key|password|passwd|secret|credential", re.IGNORECASE)


def secret_flag_names(config: Any) -> frozenset[str]:
    """Dotted flag names (`token`, `train.api_key`) of the `secret(...)` fields of an experiment's
    config dataclass (a class or an instance), nested dataclasses included."""
    from executor.core.step import is_secret

    names: set[str] = set()

    def walk(cls: Any, prefix: str, depth: int) -> None:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or depth > 8:
            return
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: only this level's secrets count
            hints = {}
        for f in dataclasses.fields(cls):
            if is_secret(f):
                names.add(prefix + f.name)
                continue
            kind = hints.get(f.name, f.type)
            if not isinstance(kind, type):  # an annotation that did not resolve: the default tells
                default = f.default_factory if f.default_factory is not dataclasses.MISSING else type(f.default)
                kind = default if isinstance(default, type) else None
            walk(kind, f"{prefix}{f.name}.", depth + 1)

    walk(config if isinstance(config, type) else type(config), "", 0)
    return frozenset(names)


def _flag_name(arg: str) -> str:
    return arg.lstrip("-").split("=", 1)[0].replace("-", "_").lower()


def _is_secret_flag(name: str, secret_names: Iterable[str]) -> bool:
    return name in {n.lower() for n in secret_names} or bool(SECRET_LOOKING.search(name.rsplit(".", 1)[-1]))


def redact_argv(argv: Sequence[str], secret_names: Iterable[str] = ()) -> list[str]:
    """argv with the values of secret flags (declared `secret(...)`, or named like a token, key,
    password or secret) replaced by `***`, in both `--flag VALUE` and `--flag=VALUE` spellings."""
    secret_names = list(secret_names)
    out: list[str] = []
    redact_next = False
    for arg in argv:
        if redact_next and not arg.startswith("--"):
            out.append(REDACTED)
            redact_next = False
            continue
        redact_next = False
        if arg.startswith("-") and len(arg) > 1 and _is_secret_flag(_flag_name(arg), secret_names):
            if "=" in arg:
                arg = arg.split("=", 1)[0] + "=" + REDACTED
            else:
                redact_next = True
        out.append(arg)
    return out


def invocation(main_file: str | None, secret_names: Iterable[str] = ()) -> dict[str, Any]:
    """Everything about this run that a record or run file should carry (argv with secrets redacted)."""
    import platform

    directory = str(Path(main_file).resolve().parent) if main_file else os.getcwd()
    return {
        **user_and_host(),
        # secret flags, and --storage-options (which may hold credentials)
        "argv": redact_argv(location.redact_argv(list(sys.argv)), secret_names),
        "cwd": os.getcwd(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git": git_state(directory),
        "uv_lock_sha256": lockfile_sha256(directory),
        "packages": package_versions(),
    }
