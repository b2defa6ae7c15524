"""Shard results reused across runs of a map-style data step: a grown corpus costs its new shards.

A shard's result is addressed by what produced it: `shard_address(kind, code, settings, shard)`, the
sha256 of the step kind, its code (`code_digest`: the source of the modules that compute the shard
plus the versions of the libraries whose bytes it writes), the step's settings that shape the
result (never its input list or its output path) and the shard itself (its output name, its input
file's content sha256 and the piece of the file it reads). After writing a shard's files, a step
records `shard-index/<address>.json` in its output: the files (paths relative to the output) with
their sha256 and the shard's small result. A later run of the same step under a new id
(`earlier_outputs`: the siblings `<name>-<12 hex>` of its output directory, the executor's naming)
looks each address up there and `reuse`s the files: each is copied only when its bytes match the
recorded sha256, so a damaged result is recomputed, never used. Full and incremental runs write
the same files, index included, so their outputs are byte-identical.
Two runners that need the same new shard at once (two runs growing the same corpus) make it once:
`reuse_or_make` takes a claim on the shard's address (`executor.claim_once`, the executor's lease
machinery) at `<parent>/.shard-claims/<name>/<address>.json` beside the step's outputs; the other
waits for it to end and copies the result from the output its SUCCESS names. The index entry is
written (atomically) after the shard's files and the claim ends after the entry, so a half-written
shard is never reused.
A dry run forecasts reuse without reading shards (`stored_addresses`, `sha256_of`): from the upstream
manifest's checksums and listings of the sources' indexes. On a bucket the manifest keeps the
store's checksum (crc32c, MD5, ETag), so `input_digests`, which reads each input for its sha256
anyway, notes in `shard-inputs.json` which sha256 each store checksum stands for; addresses stay
sha256, and reuse exact.
All storage goes through `executor.url_to_fs` (the step's storage options).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import re
from types import ModuleType
from typing import Any, Callable

from executor import ClaimSettings, cache_from_outputs, claim_once, map_shards, stored_checksum, url_to_fs
from steps.documents import read_json, write_file_atomically, write_json_atomically

INDEX_DIR = "shard-index"
INPUTS_FILE = "shard-inputs.json"  # store checksum -> sha256 of the inputs (written where the store keeps one)
CLAIMS_DIR = ".shard-claims"  # a dot-folder: no step name starts with "." (docs/concepts.md)
_ID_SUFFIX = re.compile(r"^(?P<name>.+)-[0-9a-f]{12}$")  # executor.core.identity: <name>-<12 hex>
_CHUNK = 1 << 20


def code_digest(modules: list[ModuleType], libraries: list[str]) -> str:
    """The sha256 of the modules' source and the libraries' installed versions: any edit to the
    code that computes a shard, or a new library version, gives every shard a new address."""
    h = hashlib.sha256()
    for module in modules:
        h.update(module.__name__.encode() + b"\0" + inspect.getsource(module).encode("utf-8") + b"\0")
    for library in libraries:
        h.update(f"{library}=={importlib.metadata.version(library)}\0".encode())
    return h.hexdigest()


def file_sha256(path: str) -> str:
    """The sha256 of a file's bytes (local path or URL)."""
    fs, target = url_to_fs(path)
    h = hashlib.sha256()
    with fs.open(target, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def shard_address(kind: str, code: str, settings: dict[str, Any], shard: dict[str, Any]) -> str:
    """The address of one shard's result (hex sha256 of the canonical JSON of its inputs)."""
    text = json.dumps({"kind": kind, "code": code, "settings": settings, "shard": shard},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def earlier_outputs(output_path: str) -> list[str]:
    """Other outputs of this step under the same prefix (`<parent>/<name>-<12 hex>`, this one
    excluded), sorted; none when the output is not named that way."""
    out = output_path.rstrip("/")
    parent, _, base = out.rpartition("/")
    match = _ID_SUFFIX.match(base)
    if not parent or match is None:
        return []
    fs, target = url_to_fs(parent)
    try:
        entries = fs.ls(target, detail=False)
    except FileNotFoundError:
        return []
    names = {e.rstrip("/").rsplit("/", 1)[-1] for e in entries}
    return sorted(f"{parent}/{n}" for n in names
                  if n != base and (m := _ID_SUFFIX.match(n)) and m["name"] == match["name"])


def sources(output_path: str) -> list[str]:
    """Where a run looks for shard results: the earlier outputs of the step under its prefix, then
    its outputs under the run's --cache-from prefixes that are committed and not tainted
    (`executor.cache_from_outputs`)."""
    return earlier_outputs(output_path) + cache_from_outputs(output_path)


def stored_addresses(output_path: str) -> set[str]:
    """The addresses of the shard results held by the outputs a run would take them from
    (`sources`: one listing of the step's folder, and one of each source's index: what a dry run's
    forecast reads)."""
    found: set[str] = set()
    for source in sources(output_path):
        fs, target = url_to_fs(f"{source}/{INDEX_DIR}")
        try:
            names = fs.ls(target, detail=False)
        except FileNotFoundError:
            continue
        found.update(n.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json") for n in names if n.endswith(".json"))
    return found


def input_digests(output_path: str, files: list[str], desc: str) -> list[str]:
    """Each input file's sha256 (one task per file). Where the store keeps its own checksum of a
    file (a bucket: crc32c, MD5, ETag, as the upstream manifest records it), the output also
    gets `shard-inputs.json`, that checksum -> the sha256, so a dry run can tell a bucket file's
    address without reading it (`sha256_of`). Every run of the same inputs writes the same file."""
    found = map_shards(_digests, files, desc=desc)
    known = {_checksum_key(checksum): sha for sha, checksum in found if checksum}
    if known:
        write_json_atomically(f"{output_path.rstrip('/')}/{INPUTS_FILE}", {"schema": 1, "sha256": known})
    return [sha for sha, _ in found]


def _digests(path: str) -> tuple[str, dict[str, str] | None]:
    return file_sha256(path), stored_checksum(path)


def _checksum_key(checksum: dict[str, str]) -> str:
    return f"{checksum.get('algorithm')}:{checksum.get('value')}"


def recorded_inputs(output_path: str) -> dict[str, str] | None:
    """Store checksum -> sha256 of the inputs the sources' runs read (`input_digests`); None when no
    source recorded any."""
    found: dict[str, str] | None = None
    for source in sources(output_path):
        entry = read_json(f"{source}/{INPUTS_FILE}")
        if entry and entry.get("schema") == 1:
            found = {**(found or {}), **entry["sha256"]}
    return found


def sha256_of(checksums: dict[str, dict[str, str]], files: list[str],
              output_path: str | None = None) -> list[str | None] | str:
    """Each file's sha256 for a forecast: as the upstream manifest records it, or (given the step's
    `output_path`) translated from the store's checksum it records through what earlier runs noted
    (`recorded_inputs`); None for a file no earlier run read (its shards are to process). Else why
    not: a file without a manifest entry, or store checksums no source's run noted."""
    digests: list[str | None] = []
    missing: list[str] = []
    noted: dict[str, str] | None = None
    for path in files:
        checksum = checksums.get(path.rstrip("/")) or {}
        if checksum.get("algorithm") == "sha256" or not checksum:
            digests.append(checksum.get("value"))
            missing += [] if checksum else [path]
            continue
        if output_path is not None and noted is None:
            noted = recorded_inputs(output_path) or {}
        digests.append((noted or {}).get(_checksum_key(checksum)))
    if missing:
        return (f"the upstream manifest lists {len(missing)} of {len(files)} input file(s) without a checksum "
                f"(e.g. {missing[0]})")
    unknown = [f for f, d in zip(files, digests) if d is None]
    if unknown and not noted and (output_path is None or sources(output_path)):
        said = (f"the upstream manifest holds the store's checksums, not sha256, for {len(unknown)} of "
                f"{len(files)} input file(s) (e.g. {unknown[0]})")
        return said if output_path is None else (f"{said}, and no earlier output of the step noted which sha256 "
                                                 f"they stand for ({INPUTS_FILE}: its runs predate it)")
    return digests


def claims_folder(output_path: str) -> str | None:
    """Where the claims on this step's shard results live (shared by every output of the step under
    the prefix), or None when the output is not named `<name>-<12 hex>` (no claims then)."""
    parent, _, base = output_path.rstrip("/").rpartition("/")
    match = _ID_SUFFIX.match(base)
    return f"{parent}/{CLAIMS_DIR}/{match['name']}" if parent and match else None


def reuse_or_make(output_path: str, address: str, sources: list[str], make: Callable[[], dict[str, Any]],
                  settings: ClaimSettings = ClaimSettings()) -> tuple[dict[str, Any], bool]:
    """(result, made here): the shard's result reused from `sources` (or from the output a finished
    claim names), else `make()` under the shard's claim; `make` writes the shard's files and its
    index entry (`record`) into `output_path` and returns its result."""
    out = output_path.rstrip("/")
    folder = claims_folder(out)

    def find(where: str | None) -> dict[str, Any] | None:
        named = [f"{out.rpartition('/')[0]}/{where}"] if where else []
        return reuse(out, address, named + [s for s in sources if s not in named])

    if folder is None:
        found = find(None)
        return (found, False) if found is not None else (make(), True)
    return claim_once(f"{folder}/{address}.json", find, lambda: (make(), out.rpartition("/")[2]),
                      label=f"{folder.rpartition('/')[2]} shard {address[:12]}", settings=settings,
                      holder=f"{out}/.executor/status.json")  # the step's lease: a restart takes its claims at once


def record(output_path: str, address: str, files: list[str], result: dict[str, Any],
           digests: dict[str, str] | None = None) -> None:
    """Write the index entry of a shard whose `files` (relative to the output) are written; they
    are copied in this order on reuse, so a commit marker among them goes last. `digests`: the
    sha256 of some of them, hashed as they were written (the others are read back and hashed)."""
    out, known = output_path.rstrip("/"), digests or {}
    entry = {"schema": 1, "address": address, "result": result,
             "files": [[rel, known.get(rel) or file_sha256(f"{out}/{rel}")] for rel in files]}
    write_json_atomically(f"{out}/{INDEX_DIR}/{address}.json", entry)


def record_if_missing(output_path: str, address: str, files: list[str], result: dict[str, Any],
                      digests: dict[str, str] | None = None) -> None:
    """`record`, unless the entry exists (a resumed shard whose run was killed before its entry)."""
    if read_json(f"{output_path.rstrip('/')}/{INDEX_DIR}/{address}.json") is None:
        record(output_path, address, files, result, digests)


def reuse(output_path: str, address: str, sources: list[str]) -> dict[str, Any] | None:
    """Copy the result at `address` from the first of `sources` that holds it whole into
    `output_path` (its files, then its index entry) and return its recorded result; None when no
    source holds it or every copy's bytes differ from the recorded sha256 (the caller computes)."""
    out = output_path.rstrip("/")
    for source in sources:
        entry = read_json(f"{source}/{INDEX_DIR}/{address}.json")
        if not entry or entry.get("schema") != 1 or entry.get("address") != address:
            continue
        if all(_copy_checked(f"{source}/{rel}", f"{out}/{rel}", sha) for rel, sha in entry["files"]):
            write_json_atomically(f"{out}/{INDEX_DIR}/{address}.json", entry)
            return entry["result"]
    return None


def read_checked(path: str, sha256: str) -> bytes | None:
    """A file's bytes when they match `sha256`, else None (missing or damaged)."""
    fs, target = url_to_fs(path)
    try:
        data = fs.cat_file(target)
    except FileNotFoundError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def _copy_checked(source: str, target: str, sha256: str) -> bool:
    data = read_checked(source, sha256)
    if data is None:
        return False
    write_file_atomically(target, lambda f: f.write(data))
    return True
