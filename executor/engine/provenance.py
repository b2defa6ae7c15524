"""Provenance: git state, user, host, versions, command line, function fingerprints.

This is the only module that reads the process environment for provenance; everything it finds
is recorded, never hashed into identities.
"""

from __future__ import annotations

import getpass
import hashlib
import inspect
import os
import platform
import socket
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from executor.engine import location

KEY_PACKAGES = ("stepgraph", "ray", "jax", "jaxlib", "optax", "numpy", "fsspec", "gcsfs", "s3fs",
                "tokenizers", "draccus", "pyarrow")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode(errors="replace").strip()


@lru_cache(maxsize=8)
def git_state(directory: str) -> dict[str, Any]:
    """Commit, dirty flag and a hash of the uncommitted diff of the repository holding `directory`."""
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


@lru_cache(maxsize=8)
def lockfile_sha256(directory: str) -> str | None:
    lock = _find_upwards(Path(directory), "uv.lock")
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock else None


def package_versions() -> dict[str, str]:
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
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    return {"user": user, "host": socket.gethostname(), "pid": os.getpid()}


def invocation(main_file: str | None) -> dict[str, Any]:
    """Everything about this run that a record or run file should carry."""
    directory = str(Path(main_file).resolve().parent) if main_file else os.getcwd()
    return {
        **user_and_host(),
        "argv": location.redact_argv(list(sys.argv)),  # --storage-options may hold credentials
        "cwd": os.getcwd(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git": git_state(directory),
        "uv_lock_sha256": lockfile_sha256(directory),
        "packages": package_versions(),
    }
