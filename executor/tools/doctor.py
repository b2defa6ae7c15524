"""`stepgraph doctor`: is this machine ready to run experiments against this prefix and cluster?

Each check is a `Finding` (ok or a problem, plus one line saying what was seen and how to fix it):
versions and devices, the prefix's conditional writes (a real create-if-absent and CAS round trip on
a scratch object that is then deleted), whether the Ray address answers, and whether another
installed distribution provides the import names `executor` or `steps` (both exist on PyPI).
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.core.locations import storage_from
from executor.core.urls import is_local

OUR_DISTRIBUTION = "stepgraph"
IMPORT_NAMES = ("executor", "steps")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str

    def render(self) -> str:
        return f"{'✔' if self.ok else '✘'} {self.check:<16} {self.detail}"


# -- versions -------------------------------------------------------------------------------------

def versions() -> list[Finding]:
    found = [Finding("python", True, f"{platform.python_version()} ({sys.executable})")]
    for dist in (OUR_DISTRIBUTION, "ray", "jax", "jaxlib", "fsspec", "gcsfs", "s3fs"):
        try:
            found.append(Finding(dist, True, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            optional = dist in ("gcsfs", "s3fs", "jax", "jaxlib")
            extra = " (pip install 'stepgraph[train]' for the training steps)" if dist.startswith("jax") else ""
            found.append(Finding(dist, optional, "not installed" + extra))
    if importlib.util.find_spec("jax") is None:  # a lean install: nothing to list
        return found
    try:
        import jax

        devices = jax.devices()
        kinds = sorted({f"{d.platform}:{getattr(d, 'device_kind', '?')}" for d in devices})
        found.append(Finding("devices", True, f"{len(devices)} JAX device(s): {', '.join(kinds)}"))
    except Exception as e:  # a broken accelerator install is something to report, not to crash on
        found.append(Finding("devices", False, f"JAX could not list devices: {type(e).__name__}: {e}"))
    return found


# -- prefix ---------------------------------------------------------------------------------------

def prefix_round_trip(prefix: str, storage_options: dict | None) -> list[Finding]:
    """Create-if-absent and compare-and-swap on a scratch object under the prefix, then delete it.

    Exactly the operations a lease needs: a second create and a CAS with a stale generation
    must both lose, and the winning writes must read back.
    """
    from executor.engine.store import open_store

    scratch = f".doctor-{uuid.uuid4().hex[:12]}"
    key = f"{scratch}/probe.json"
    where = f"{prefix.rstrip('/')}/{key}"
    try:
        store = open_store(prefix, storage_from(storage_options, prefix).options_for(prefix))
        first = store.create_if_absent(key, b'{"doctor": 1}')
        results = [("create-if-absent writes a new object", first is not None),
                   ("a second create-if-absent loses", store.create_if_absent(key, b'{"doctor": 0}') is None)]
        second = store.replace_if_generation(key, b'{"doctor": 2}', first) if first else None
        results.append(("compare-and-swap with the current generation wins", second is not None))
        stale = store.replace_if_generation(key, b'{"doctor": 3}', first) if first else "skipped"
        results.append(("compare-and-swap with a stale generation loses", stale is None))
        read = store.read(key)
        results.append(("the winning write reads back", read is not None and read.data == b'{"doctor": 2}'))
        store.delete(key)
        results.append(("the scratch object is deleted", store.read(key) is None))
        if is_local(prefix):  # a local store keeps a lock file beside the object
            shutil.rmtree(Path(prefix) / scratch, ignore_errors=True)
    except Exception as e:
        return [Finding("prefix", False, f"{prefix}: {type(e).__name__}: {e}. Check the path, the credentials "
                                         f"and --storage-options (or EXECUTOR_STORAGE_OPTIONS).")]
    failed = [label for label, ok in results if not ok]
    if failed:
        return [Finding("prefix", False, f"{prefix} is reachable but its conditional writes do not hold "
                                         f"({'; '.join(failed)}); leases would not be safe here. "
                                         f"Scratch object: {where}")]
    return [Finding("prefix", True, f"{prefix}: reachable; create-if-absent and compare-and-swap work "
                                    f"(scratch object written, raced, read back and deleted)")]


# -- Ray ------------------------------------------------------------------------------------------

def ray_address(address: str | None) -> list[Finding]:
    from executor.core.errors import ExecutorError
    from executor.engine.runner.ray_env import check_reachable

    if not address:
        return [Finding("ray cluster", True, "no address (--ray-address / RAY_ADDRESS): runs start an embedded local cluster")]
    if ":" not in address.split("://", 1)[-1]:
        return [Finding("ray cluster", True, f"{address!r}: resolved by Ray at run time (not probed)")]
    try:
        check_reachable(address, timeout_s=5.0)
    except ExecutorError as e:
        return [Finding("ray cluster", False, str(e))]
    return [Finding("ray cluster", True, f"{address}: something answers on that port")]


# -- shadowing ------------------------------------------------------------------------------------

def _providers(name: str) -> list[tuple[str, str, Path | None]]:
    """(distribution, version, location of its `name`) for every installed distribution other than
    ours that declares the top-level import name `name`."""
    found = []
    for dist in importlib.metadata.distributions():
        dist_name = dist.metadata.get("Name") or "?"
        if dist_name.lower() == OUR_DISTRIBUTION:
            continue
        top_level = (dist.read_text("top_level.txt") or "").split()
        from_record = {str(f).split("/", 1)[0].removesuffix(".py") for f in (dist.files or [])
                       if "/" in str(f) or str(f).endswith(".py")}
        if name in top_level or name in from_record:
            location = Path(str(dist.locate_file(name)))
            found.append((dist_name, dist.version, location))
    return found


def _is_ours(origin: str | None) -> bool:
    return origin is not None and Path(origin).resolve().is_relative_to(PROJECT_ROOT)


def shadowing(search_path: list[str] | None = None) -> list[Finding]:
    """Which file `import executor` / `import steps` would load, and who else provides those names."""
    found = []
    for name in IMPORT_NAMES:
        spec = importlib.machinery.PathFinder.find_spec(name, search_path or sys.path)
        origin = spec.origin if spec else None
        others = _providers(name)
        if _is_ours(origin) and not others:
            found.append(Finding(f"import {name}", True, f"{origin} (stepgraph's)"))
            continue
        fix = "; ".join(f"`pip uninstall {d}` (or `uv remove {d}`)" for d, _, _ in others) or \
            "remove it from PYTHONPATH / sys.path"
        named = ", ".join(f"{d} {v} at {loc}" for d, v, loc in others) or "no installed distribution"
        if _is_ours(origin):
            found.append(Finding(f"import {name}", False, f"{origin} is stepgraph's for now, but {named} also "
                                                          f"provides `{name}` and wins if it comes earlier on "
                                                          f"sys.path. Fix: {fix}"))
        else:
            found.append(Finding(f"import {name}", False, f"`import {name}` loads {origin}, not stepgraph's "
                                                          f"(provided by {named}). Fix: {fix}"))
    return found


def run_doctor(prefix: str, storage_options: dict | None, address: str | None) -> list[Finding]:
    return versions() + prefix_round_trip(prefix, storage_options) + ray_address(address) + shadowing()


def cmd_doctor(args: Any) -> int:
    from executor.core.exit_codes import ExitCode
    from executor.tools.commands import default_prefix

    findings = run_doctor(default_prefix(args.prefix), args.storage_options,
                          args.ray_address or os.environ.get("RAY_ADDRESS"))
    for finding in findings:
        print(finding.render())
    problems = [f for f in findings if not f.ok]
    print(f"{len(problems)} problem(s)" if problems else "all checks passed")
    return ExitCode.FAILED if problems else ExitCode.OK
