"""The default prefix: `cache/` in the project that holds the experiment, wherever it is run from.

The project is the nearest folder above the experiment file (or, with no file, above the working
directory) that holds a pyproject.toml or a .git; with none, the working directory.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_PREFIX_NAME = "cache"
PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(start: str | Path | None, cwd: str | Path | None = None) -> Path:
    """The nearest folder at or above `start` (a file or folder; default the working directory)
    holding a project marker; the working directory when there is none."""
    here = Path(cwd or Path.cwd()).resolve()
    origin = Path(start).resolve() if start else here
    folder = origin if origin.is_dir() else origin.parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    return here


def default_prefix(experiment_file: str | Path | None, cwd: str | Path | None = None) -> str:
    """`<project root>/cache`, absolute."""
    return str(project_root(experiment_file, cwd) / DEFAULT_PREFIX_NAME)
