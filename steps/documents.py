"""Reading and writing document shards: JSONL, optionally .gz or .zst, one {"id", "text", ...} a line.

Every data step reads its input through `list_document_files` + `read_documents` and writes through
`write_documents`, so bad input is reported the same way everywhere: an error naming the file, the
line and the value, or (with `on_bad_line="skip"`) a counted skip that the step reports.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Literal

import fsspec

from executor.engine import location
import zstandard
from fsspec.implementations.local import LocalFileSystem

try:  # orjson is several times faster; the stdlib parser gives the same results
    import orjson

    _loads = orjson.loads
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, UnicodeDecodeError)

    def _dumps(doc: dict) -> bytes:
        return orjson.dumps(doc)
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    _JSONError = (json.JSONDecodeError, UnicodeDecodeError)

    def _dumps(doc: dict) -> bytes:
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")  # orjson's layout


OnBadLine = Literal["error", "skip"]
DOCUMENT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst")


class BadInputError(ValueError):
    """Input a step cannot use: a malformed line, a document without text, no input files."""


@dataclass
class ReadStats:
    """What reading saw: documents yielded and lines skipped (with the first few reasons)."""

    documents: int = 0
    bytes: int = 0
    skipped_lines: int = 0
    skip_examples: list[str] = field(default_factory=list)

    def skip(self, where: str, why: str) -> None:
        self.skipped_lines += 1
        if len(self.skip_examples) < 5:
            self.skip_examples.append(f"{where}: {why}")

    def merge(self, other: "ReadStats") -> "ReadStats":
        self.documents += other.documents
        self.bytes += other.bytes
        self.skipped_lines += other.skipped_lines
        self.skip_examples.extend(other.skip_examples[: max(0, 5 - len(self.skip_examples))])
        return self


def combined_stats(shard_stats: list[ReadStats], input_path: str, file_count: int) -> ReadStats:
    """Merge per-shard read stats; no documents at all is bad input, not an empty output."""
    stats = ReadStats()
    for s in shard_stats:
        stats.merge(s)
    if stats.documents == 0:
        raise BadInputError(f"input {input_path!r}: no documents in {file_count} file(s); "
                            f"nothing to deduplicate (skipped lines: {stats.skipped_lines})")
    return stats


def list_document_files(input_path: str) -> list[str]:
    """The document files named by `input_path`, sorted: a file, a glob, or a directory.

    A directory that holds no document files but has a `docs/` subdirectory (a download or dedup
    step's output) is read through that subdirectory.
    """
    fs, path = location.url_to_fs(input_path)
    protocol = input_path.split("://", 1)[0] + "://" if "://" in input_path else ""

    def url(p: str) -> str:
        return protocol + p if protocol and protocol != "file://" else p

    if any(ch in path for ch in "*?["):
        found = sorted(p for p in fs.glob(path) if fs.isfile(p))
        if not found:
            raise BadInputError(f"input {input_path!r}: the glob matched no files; check the path")
        return [url(p) for p in found]
    if not fs.exists(path):
        raise BadInputError(f"input {input_path!r} does not exist; check the path "
                            f"(or that the step producing it has run)")
    if fs.isfile(path):
        return [url(path)]
    found = sorted(p for p in fs.ls(path, detail=False) if p.endswith(DOCUMENT_SUFFIXES) and fs.isfile(p))
    if not found and fs.isdir(path.rstrip("/") + "/docs"):
        return list_document_files(url(path.rstrip("/") + "/docs"))
    if not found:
        raise BadInputError(f"input directory {input_path!r} holds no document files "
                            f"(looked for *{', *'.join(DOCUMENT_SUFFIXES)}); is it the right directory?")
    return [url(p) for p in found]


def shard_stem(path: str) -> str:
    """'a/b/part-003.jsonl.zst' -> 'part-003': the name an output shard derived from it takes."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    for suffix in sorted(DOCUMENT_SUFFIXES + (".json", ".gz", ".zst"), key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def open_binary_lines(path: str) -> io.BufferedIOBase:
    """Open a (possibly compressed) file for reading decompressed bytes, chosen by suffix."""
    raw = location.open_file(path, "rb").open()
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if path.endswith(".zst"):
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True),
                                 buffer_size=1 << 20)
    return raw


def count_records(path: str) -> int:
    """The number of non-blank lines of a file (documents, before any are found malformed)."""
    with open_binary_lines(path) as f:
        return sum(1 for line in f if line.strip())


def read_documents(path: str, on_bad_line: OnBadLine = "error", stats: ReadStats | None = None,
                   records: tuple[int, int] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the documents of one file in order, each with a str "id" and a str "text".

    A line that is not a JSON object with those fields (or not UTF-8) raises `BadInputError`
    naming the file, the line number and the value, unless `on_bad_line="skip"`, which counts
    it in `stats` instead. Blank lines are ignored. Integer ids are turned into strings.
    `records=(start, end)` reads only the non-blank lines numbered start..end-1 (from 0).
    """
    if on_bad_line not in ("error", "skip"):
        raise ValueError(f"on_bad_line={on_bad_line!r}: use 'error' or 'skip'")
    stats = stats if stats is not None else ReadStats()
    first, last = records if records is not None else (0, None)
    record = -1
    with open_binary_lines(path) as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            record += 1
            if record < first:
                continue
            if last is not None and record >= last:
                break
            problem = None
            try:
                doc = _loads(line)
            except _JSONError as e:
                problem = f"not valid UTF-8 JSON ({e})"
            else:
                problem = _document_problem(doc)
            if problem is not None:
                where = f"{path}:{line_number}"
                if on_bad_line == "skip":
                    stats.skip(where, problem)
                    continue
                raise BadInputError(f"{where}: {problem}; line starts {line[:120]!r}. Fix the line, "
                                    f"or set on_bad_line='skip' to count and skip bad lines")
            if not isinstance(doc["id"], str):
                doc["id"] = str(doc["id"])
            stats.documents += 1
            stats.bytes += len(line)
            yield doc


def _document_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return f"expected a JSON object, got {type(doc).__name__}"
    if "text" not in doc:
        return f"document {doc.get('id')!r} has no 'text' field (fields: {sorted(doc)[:10]})"
    if not isinstance(doc["text"], str):
        return f"document {doc.get('id')!r}: 'text' must be a string, got {type(doc['text']).__name__}"
    if "id" not in doc:
        return "document has no 'id' field"
    if not isinstance(doc["id"], (str, int)) or isinstance(doc["id"], bool):
        return f"'id' must be a string, got {type(doc['id']).__name__} {doc['id']!r}"
    return None


def write_documents(path: str, docs: Iterable[dict[str, Any]], level: int = 3) -> int:
    """Write documents as JSONL (.zst/.gz by suffix) atomically: a temporary name, then rename.

    Returns the number of documents written. A reader never sees a partly written file.
    """
    fs, target = location.url_to_fs(path)
    parent = target.rsplit("/", 1)[0] if "/" in target else "."
    fs.makedirs(parent, exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    count = 0
    try:
        with fs.open(tmp, "wb") as raw:
            if target.endswith(".zst"):
                out: Any = zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False)
            elif target.endswith(".gz"):
                out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level)
            else:
                out = raw
            buffer: list[bytes] = []
            for doc in docs:
                buffer.append(_dumps(doc))
                count += 1
                if len(buffer) >= 1024:
                    out.write(b"\n".join(buffer) + b"\n")
                    buffer.clear()
            if buffer:
                out.write(b"\n".join(buffer) + b"\n")
            if out is not raw:
                out.close()
        fs.mv(tmp, target)
    except BaseException:
        try:
            fs.rm(tmp)
        except (FileNotFoundError, OSError):
            pass
        raise
    return count


def write_file_atomically(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Call `write(f)` to fill the file at `path` (local or URL); a reader never sees a torn file."""
    fs, target = location.url_to_fs(str(path))
    if not isinstance(fs, LocalFileSystem):
        # An object appears whole when its upload completes, so the final key is written directly.
        # The bytes are built first: fsspec commits a file on close even when the writer raised.
        buffer = io.BytesIO()
        write(buffer)
        fs.pipe_file(target, buffer.getvalue())
        return
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise



def write_json_atomically(path: str, value: Any) -> None:
    """Write a small JSON file whole (see write_file_atomically)."""
    data = json.dumps(value, indent=1, sort_keys=True).encode("utf-8")
    write_file_atomically(path, lambda f: f.write(data))


def remove_stale_temporaries(root: str, markers: tuple[str, ...] = (".tmp-", ".partial-")) -> int:
    """Delete temporary files a killed earlier attempt left under `root`; returns how many.

    Call at the start of a step, before any worker writes: the step owns its output directory,
    except dot-directories such as `.executor/` (the executor's own files), which are left alone.
    """
    fs, path = location.url_to_fs(root)
    if not fs.exists(path):
        return 0
    base = path.rstrip("/")
    stale = [p for p in fs.find(path)
             if any(m in p.rsplit("/", 1)[-1] for m in markers)
             and not any(part.startswith(".") for part in p[len(base):].strip("/").split("/")[:-1])]
    for p in stale:
        fs.rm(p)
    return len(stale)


def read_json(path: str) -> Any | None:
    """A JSON file's value, or None when it does not exist."""
    fs, target = location.url_to_fs(path)
    try:
        with fs.open(target, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
