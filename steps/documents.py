"""Reading and writing document shards: JSONL (optionally .gz or .zst, one {"id", "text", ...} a line)
or Parquet (`text_column`/`id_column` read by row group).

A big file is read as several `DocumentShard`s (`plan_document_shards`): byte ranges of an
uncompressed JSONL file (line-aligned: a line belongs to the range its first byte is in) or runs of
a Parquet file's row groups, so one huge file uses every core.

Every data step reads its input through `list_document_files` + `read_documents` and writes through
`write_documents`, so bad input is reported the same way everywhere: an error naming the file, the
line and the value, or (with `on_bad_line="skip"`) a counted skip that the step reports.
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.documents", DATA)

import collections
import concurrent.futures
import contextlib
import contextvars
import gzip
import hashlib
import io
import itertools
import json
import operator
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Literal, Sequence

import fsspec

from executor import Location, open_file, url_to_fs
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
DOCUMENT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst", ".parquet")


class BadInputError(ValueError):
    """Input a step cannot use: a malformed line, a document without text, no input files."""


@dataclass
class ReadStats:
    """What reading saw: documents yielded and lines skipped (with the first few reasons)."""

    documents: int = 0
    bytes: int = 0
    skipped_lines: int = 0
    skip_examples: list[str] = field(default_factory=list)
    numeric_ids: int = 0
    """Documents whose integer id was turned into a string."""

    def skip(self, where: str, why: str) -> None:
        self.skipped_lines += 1
        if len(self.skip_examples) < 5:
            self.skip_examples.append(f"{where}: {why}")

    def merge(self, other: "ReadStats") -> "ReadStats":
        self.documents += other.documents
        self.bytes += other.bytes
        self.skipped_lines += other.skipped_lines
        self.numeric_ids += other.numeric_ids
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
    fs, path = url_to_fs(input_path)
    protocol = Location(input_path).protocol

    def url(p: str) -> str:
        return p if protocol == "file" else f"{protocol}://{p}"

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
    raw = open_file(path, "rb").open()
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if path.endswith(".zst"):
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True),
                                 buffer_size=1 << 20)
    return raw


BLOCK_BYTES = 1 << 20


def decompressed_blocks(path: str, block_bytes: int | None = None) -> Iterator[bytes]:
    """The decompressed bytes of a whole (possibly compressed) file in blocks of about `block_bytes`
    of whole lines: every block ends in a newline but the file's last one, which ends where the file
    does (`block_bytes` None: `BLOCK_BYTES`). Read straight from the decompressor in large pieces (no
    line buffer, no Python per line), one block ahead in one other thread (decompression releases the
    GIL, so it runs beside the caller's work on the block before)."""
    return _read_ahead(_line_blocks_of(path, block_bytes or BLOCK_BYTES))


def _line_blocks_of(path: str, block_bytes: int) -> Iterator[bytes]:
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open_file(path, "rb").open())
        if path.endswith(".gz"):
            f = stack.enter_context(gzip.GzipFile(fileobj=raw))
        elif path.endswith(".zst"):
            f = stack.enter_context(zstandard.ZstdDecompressor().stream_reader(raw, read_size=1 << 17))
        else:
            f = raw
        carry = b""
        while data := f.read(block_bytes):
            cut = data.rfind(b"\n") + 1
            if not cut:
                carry += data
                continue
            yield b"".join((carry, memoryview(data)[:cut])) if carry or cut < len(data) else data
            carry = data[cut:]
        if carry:
            yield carry


def _read_ahead(items: Iterator[bytes]) -> Iterator[bytes]:
    """`items`, each made in one other thread, in the caller's context (so the file is opened with the
    step's storage options), while the caller works on the one before; closing this closes `items`
    (in this thread, once the other has stopped)."""
    context = contextvars.copy_context()  # the step's storage options (executor's location helpers)
    try:
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="read-ahead") as pool:
            coming = pool.submit(context.run, next, items, None)
            while (item := coming.result()) is not None:
                coming = pool.submit(context.run, next, items, None)
                yield item
    finally:
        items.close()  # type: ignore[attr-defined]


_FIRST_BYTE = operator.itemgetter(0)
_SPACE = b" \t\r\x0b\x0c"
"""The bytes besides a newline that `bytes.strip` removes: a line starting with one may be blank."""


def _numbered_blocks(path: str, records: tuple[int, int | None] = (0, None)
                     ) -> Iterator[tuple[Sequence[int], list[bytes], bool]]:
    """(line numbers from 1, lines without their newline, whether the last of them had one) of the
    non-blank lines of a whole file, a block (`decompressed_blocks`) at a time; `records` as in
    `read_documents`. One split per block: a line is looked at alone only in a block where some
    line may be blank (empty, or starting with white space)."""
    first, last = records
    number, seen = 1, 0
    for block in decompressed_blocks(path):
        lines = block.split(b"\n")
        ended = not lines[-1]
        if ended:
            lines.pop()
        count = len(lines)
        numbers: Sequence[int] = range(number, number + count)
        if not _none_blank(lines):
            kept = [i for i, line in enumerate(lines) if line.strip()]
            ended = ended or not lines[-1].strip()
            numbers, lines = [number + i for i in kept], [lines[i] for i in kept]
        number += count
        lo, hi = max(0, first - seen), len(lines) if last is None else max(0, min(len(lines), last - seen))
        seen += len(lines)
        if lo < hi:
            yield numbers[lo:hi], lines[lo:hi], ended or hi < len(lines)
        if last is not None and seen >= last:
            return


def _none_blank(lines: list[bytes]) -> bool:
    """No line is empty or starts with white space (so none is blank): one C-level pass."""
    try:
        firsts = bytes(map(_FIRST_BYTE, lines))
    except IndexError:  # an empty line
        return False
    return not any(c in firsts for c in _SPACE)


def count_records(path: str) -> int:
    """The number of non-blank lines of a file (documents, before any are found malformed)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        with open_file(path, "rb") as f:
            return pq.ParquetFile(f).metadata.num_rows
    with contextlib.closing(_numbered_blocks(path)) as blocks:
        return sum(len(lines) for _, lines, _ in blocks)


def read_documents(path: str, on_bad_line: OnBadLine = "error", stats: ReadStats | None = None,
                   records: tuple[int, int] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the documents of one file in order, each with a str "id" and a str "text".

    A line that is not a JSON object with those fields (or not UTF-8) raises `BadInputError`
    naming the file, the line number and the value, unless `on_bad_line="skip"`, which counts
    it in `stats` instead. Blank lines are ignored. Integer ids are turned into strings.
    `records=(start, end)` reads only the non-blank lines numbered start..end-1 (from 0).
    """
    for block in read_document_blocks(path, on_bad_line, stats, records):
        yield from block


def read_document_blocks(path: str, on_bad_line: OnBadLine = "error", stats: ReadStats | None = None,
                         records: tuple[int, int] | None = None) -> Iterator[list[dict[str, Any]]]:
    """`read_documents`' documents in lists of up to `BLOCK_LINES`: a block of lines is parsed and
    checked at once, with no Python call per line unless one of them is bad."""
    if on_bad_line not in ("error", "skip"):
        raise ValueError(f"on_bad_line={on_bad_line!r}: use 'error' or 'skip'")
    stats = stats if stats is not None else ReadStats()
    first, last = records if records is not None else (0, None)
    if path.endswith(".parquet"):
        docs = itertools.islice(_read_parquet(DocumentShard(path), stats), first, last)
        yield from _batched(docs, BLOCK_LINES)
        return
    with contextlib.closing(_numbered_blocks(path, (first, last))) as blocks:
        for numbers, lines, ended in blocks:
            for lo in range(0, len(lines), BLOCK_LINES):
                hi = lo + BLOCK_LINES
                yield from _parse_block(numbers[lo:hi], lines[lo:hi], path, on_bad_line, stats,
                                        newline=True, ended=ended or hi < len(lines))


BLOCK_LINES = 1024


def _parse_block(numbers: Sequence[Any], lines: list[bytes], path: str, on_bad_line: OnBadLine,
                 stats: ReadStats, sep: str = ":", newline: bool = False,
                 ended: bool = True) -> Iterator[list[dict[str, Any]]]:
    """The documents on lines (numbered by line number or position): one list, parsed at once, when
    every line is a document with a str id and a str text; else a list per document, each line
    parsed (`_parse_line`) only when the one before it has been taken, so a reader that stops early
    never meets a bad line after its last document. `newline`: the lines come without the newline
    they had (all of them, or all but the last when not `ended`), which still counts in `stats.bytes`."""
    try:
        docs = list(map(_loads, lines))
    except _JSONError:
        docs = None
    if docs is not None and _all_documents(docs):
        stats.documents += len(docs)
        stats.bytes += sum(map(len, lines)) + (len(lines) - (not ended) if newline and lines else 0)
        yield docs
        return
    last = len(lines) - 1
    for i, (where, line) in enumerate(zip(numbers, lines)):
        if newline and (ended or i < last):
            line += b"\n"
        doc = _parse_line(line, f"{path}{sep}{where}", on_bad_line, stats)
        if doc is not None:
            yield [doc]


_GET_TEXT, _GET_ID = operator.methodcaller("get", "text"), operator.methodcaller("get", "id")


def _all_documents(values: list[Any]) -> bool:
    """Every value is a JSON object with a str "text" and a str "id": C-level maps, no Python per value
    (of JSON's values only an object has `.get`)."""
    try:
        types = set(map(type, map(_GET_TEXT, values))) | set(map(type, map(_GET_ID, values)))
    except AttributeError:
        return False
    return types <= {str} and set(map(type, values)) <= {dict}


def _parse_line(line: bytes, where: str, on_bad_line: OnBadLine, stats: ReadStats) -> dict[str, Any] | None:
    """The document on one JSONL line, or None when it is bad and `on_bad_line` is "skip"."""
    try:
        doc = _loads(line)
    except _JSONError as e:
        problem: str | None = f"not valid UTF-8 JSON ({e})"
    else:
        problem = _document_problem(doc)
    if problem is not None:
        if on_bad_line == "skip":
            stats.skip(where, problem)
            return None
        raise BadInputError(f"{where}: {problem}; line starts {line[:120]!r}. Fix the line, "
                            f"or set on_bad_line='skip' to count and skip bad lines")
    if not isinstance(doc["id"], str):
        doc["id"] = str(doc["id"])
        stats.numeric_ids += 1
    stats.documents += 1
    stats.bytes += len(line)
    return doc


@dataclass(frozen=True)
class DocumentShard:
    """A piece of one input file: bytes [start, end) of a JSONL file, or row groups [start, end)
    of a Parquet file (end None: to the end of the file)."""

    path: str
    start: int = 0
    end: int | None = None
    text_column: str = "text"
    id_column: str = "id"

    @property
    def whole_file(self) -> bool:
        return self.start == 0 and self.end is None


def plan_document_shards(files: list[str], shard_bytes: int, text_column: str = "text",
                         id_column: str = "id") -> list[DocumentShard]:
    """The shards that read `files` in order, none much larger than `shard_bytes` when the file
    allows it (compressed JSONL cannot be split: one shard per file)."""
    shards: list[DocumentShard] = []
    for path in files:
        fs, target = url_to_fs(path)
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            with fs.open(target, "rb") as f:
                meta = pq.ParquetFile(f).metadata
            groups, first, size = meta.num_row_groups, 0, 0
            for g in range(groups):
                size += meta.row_group(g).total_byte_size
                if size >= shard_bytes and g + 1 < groups:
                    shards.append(DocumentShard(path, first, g + 1, text_column, id_column))
                    first, size = g + 1, 0
            shards.append(DocumentShard(path, first, None, text_column, id_column))
        elif path.endswith(".jsonl"):
            size = fs.size(target)
            pieces = max(1, -(-size // max(1, shard_bytes)))
            bounds = [size * k // pieces for k in range(pieces)] + [None]
            shards.extend(DocumentShard(path, bounds[k], bounds[k + 1], text_column, id_column)
                          for k in range(pieces))
        else:
            shards.append(DocumentShard(path, 0, None, text_column, id_column))
    return shards


def shard_names(shards: list[DocumentShard]) -> list[str]:
    """Output names: the file's stem, with `.<part>` when the file is read as several shards;
    prefixed by position when two stems collide."""
    parts: dict[str, int] = {}
    for shard in shards:
        parts[shard.path] = parts.get(shard.path, 0) + 1
    seen: dict[str, int] = {}
    names = []
    for shard in shards:
        k = seen[shard.path] = seen.get(shard.path, -1) + 1
        names.append(shard_stem(shard.path) + (f".{k:05d}" if parts[shard.path] > 1 else ""))
    if len(set(names)) == len(names):
        return names
    return [f"{i:05d}-{n}" for i, n in enumerate(names)]


def read_shard(shard: DocumentShard, on_bad_line: OnBadLine = "error",
               stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Yield the documents of one shard in order (see `read_documents` for what is checked)."""
    return _documents_of(read_shard_blocks(shard, on_bad_line, stats))


def _documents_of(blocks: Iterator[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """The documents of `blocks`, one by one; closing this closes `blocks` (and the file under them)."""
    with contextlib.closing(blocks):  # type: ignore[type-var]
        for block in blocks:
            yield from block


def read_shard_blocks(shard: DocumentShard, on_bad_line: OnBadLine = "error",
                      stats: ReadStats | None = None) -> Iterator[list[dict[str, Any]]]:
    """`read_shard`'s documents in lists (see `read_document_blocks`)."""
    stats = stats if stats is not None else ReadStats()
    if shard.path.endswith(".parquet"):
        return _batched(_read_parquet(shard, stats), BLOCK_LINES)
    if shard.whole_file:
        return read_document_blocks(shard.path, on_bad_line, stats)
    if on_bad_line not in ("error", "skip"):
        raise ValueError(f"on_bad_line={on_bad_line!r}: use 'error' or 'skip'")
    return (docs for block in _batched(_byte_range_lines(shard), BLOCK_LINES)
            for docs in _parse_block([where for where, _ in block], [line for _, line in block], shard.path,
                                     on_bad_line, stats, "@byte"))


def _byte_range_lines(shard: DocumentShard) -> Iterator[tuple[int, bytes]]:
    """(byte position, line) of the non-blank lines that start in [start, end) of an uncompressed file."""
    with open_file(shard.path, "rb") as f:
        position = shard.start
        if shard.start > 0:  # the line under way at `start` belongs to the previous shard
            f.seek(shard.start - 1)
            if f.read(1) != b"\n":
                position += len(f.readline())
        end = shard.end if shard.end is not None else float("inf")
        while position < end:
            line = f.readline()
            if not line:
                break
            if line.strip():
                yield position, line
            position += len(line)


def read_shard_lines(shard: DocumentShard) -> Iterator[bytes]:
    """The non-blank lines of a JSONL shard as stored (newline included); when every line is a valid
    document, line i holds the i-th document `read_shard` yields. For copying documents unparsed."""
    if shard.path.endswith(".parquet"):
        raise ValueError(f"{shard.path}: a Parquet shard has no lines")
    numbered = _file_lines(shard.path) if shard.whole_file else _byte_range_lines(shard)
    return (line for _, line in numbered)


def _file_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line) of the non-blank lines of a whole (possibly compressed) file."""
    with contextlib.closing(_numbered_blocks(path)) as blocks:
        for numbers, lines, ended in blocks:
            if not ended:
                yield from zip(numbers[:-1], [line + b"\n" for line in lines[:-1]])
                yield numbers[-1], lines[-1]
            else:
                yield from zip(numbers, [line + b"\n" for line in lines])


def parse_document(line: bytes, where: str) -> dict[str, Any]:
    """The document on one JSONL line (see `read_documents`); `BadInputError` naming `where` if it is not one."""
    doc = _parse_line(line, where, "error", ReadStats())
    assert doc is not None  # "error" raises instead of skipping
    return doc


def _read_parquet(shard: DocumentShard, stats: ReadStats) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    with open_file(shard.path, "rb") as f:
        parquet = pq.ParquetFile(f)
        names = parquet.schema_arrow.names
        for column in (shard.text_column, shard.id_column):
            if column not in names:
                raise BadInputError(f"{shard.path}: no column {column!r} (columns: {names[:10]}); "
                                    f"set text_column/id_column to the file's text and id columns")
        end = parquet.metadata.num_row_groups if shard.end is None else shard.end
        for group in range(shard.start, end):
            table = parquet.read_row_group(group, columns=[shard.id_column, shard.text_column])
            ids = table.column(shard.id_column).to_pylist()
            texts = table.column(shard.text_column).to_pylist()
            for row, (doc_id, text) in enumerate(zip(ids, texts)):
                if not isinstance(text, str) or doc_id is None:
                    raise BadInputError(f"{shard.path}: row group {group} row {row}: "
                                        f"{shard.text_column!r} must be a string and {shard.id_column!r} set "
                                        f"(got {type(text).__name__}, {doc_id!r})")
                stats.documents += 1
                stats.bytes += len(text)
                yield {"id": str(doc_id), "text": text}


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


def dumps_document(doc: dict[str, Any]) -> bytes:
    """One document as a JSONL line, without the newline (as `write_documents` writes it)."""
    return _dumps(doc)


def write_documents(path: str, docs: Iterable[dict[str, Any]], level: int = 3, sha256: Any = None) -> int:
    """Write documents as JSONL (.zst/.gz by suffix) or Parquet (.parquet: `id`, `text` columns)
    atomically: a temporary name, then rename.

    Returns the number of documents written. A reader never sees a partly written file. `sha256`
    (a `hashlib.sha256()`), when given, is updated with the file's bytes as they are written.
    """
    if sha256 is not None and path.endswith(".parquet"):
        raise ValueError(f"{path}: sha256 while writing is for JSONL files; hash a Parquet file once written")
    with _atomic_file(path, sha256) as (raw, target):
        if target.endswith(".parquet"):
            return _write_parquet(raw, docs)
        return _write_lines(raw, target, (_dumps(doc) for doc in docs), level)


def write_json_lines(path: str, lines: Iterable[bytes], level: int = 3) -> int:
    """Like `write_documents` for documents already serialised: one JSON object per item, no newline."""
    with _atomic_file(path) as (raw, target):
        return _write_lines(raw, target, lines, level)


def write_line_blocks(path: str, blocks: Iterable[bytes], level: int = 3, sha256: Any = None) -> None:
    """Like `write_json_lines` for lines already joined: each block is whole lines, each ending in a
    newline (the same file as `write_json_lines` of those lines). `sha256` as in `write_documents`.

    The blocks are compressed, hashed and written in a second thread, in order, while the caller
    makes the next ones (zstd, gzip and sha256 release the GIL on large buffers): the same bytes, and
    the step's two main costs on two cores. At most `WRITE_BEHIND` blocks wait for that thread."""
    with _atomic_file(path, sha256) as (raw, target):
        out = _compressing(raw, target, level)
        with _written_behind(out.write, WRITE_BEHIND) as write:
            for block in blocks:
                write(block)
        if out is not raw:
            out.close()


WRITE_BEHIND = 2


@contextlib.contextmanager
def _written_behind(write: Callable[[bytes], Any], depth: int) -> Iterator[Callable[[bytes], None]]:
    """A function that hands its argument to `write` in one other thread, in call order, waiting when
    `depth` calls are queued; every call has ended when the block ends, and the first error of
    `write` is raised (in a later call or at the end)."""
    pending: collections.deque = collections.deque()
    context = contextvars.copy_context()  # the step's storage options, as in `_read_ahead`
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="write-behind") as pool:

        def submit(data: bytes) -> None:
            pending.append(pool.submit(context.run, write, data))
            while len(pending) > depth:
                pending.popleft().result()

        yield submit  # an error here waits for the queued calls (the pool's exit) and is raised
        while pending:
            pending.popleft().result()


class _HashingWriter:
    """A binary file that hashes what goes through it."""

    def __init__(self, raw: BinaryIO, sha256: Any) -> None:
        self.raw, self.sha256 = raw, sha256

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


@contextlib.contextmanager
def _atomic_file(path: str, sha256: Any = None) -> Iterator[tuple[BinaryIO, str]]:
    """(a new temporary file, the final path): renamed to the final path when the block succeeds;
    what is written to it goes through `sha256` too, when given."""
    fs, target = url_to_fs(path)
    parent = target.rsplit("/", 1)[0] if "/" in target else "."
    fs.makedirs(parent, exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with fs.open(tmp, "wb") as raw:
            yield (raw if sha256 is None else _HashingWriter(raw, sha256)), target  # type: ignore[misc]
        fs.mv(tmp, target)
    except BaseException:
        try:
            fs.rm(tmp)
        except (FileNotFoundError, OSError):
            pass
        raise


def _compressing(raw: BinaryIO, target: str, level: int) -> Any:
    """A writer compressing into `raw` by `target`'s suffix (`raw` itself when uncompressed)."""
    if target.endswith(".zst"):
        return zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False)
    if target.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level)
    return raw


def _write_lines(raw: BinaryIO, target: str, lines: Iterable[bytes], level: int) -> int:
    """Write lines (compressed by `target`'s suffix), 1024 at a time; returns how many."""
    out = _compressing(raw, target, level)
    count = 0
    for batch in _batched(lines, 1024):
        out.write(b"\n".join(batch) + b"\n")
        count += len(batch)
    if out is not raw:
        out.close()
    return count


def _batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _write_parquet(raw: Any, docs: Iterable[dict[str, Any]], rows_per_group: int = 8192) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    count = 0
    with pq.ParquetWriter(raw, schema, compression="zstd") as writer:
        iterator = iter(docs)
        while batch := list(itertools.islice(iterator, rows_per_group)):
            writer.write_table(pa.table({"id": [d["id"] for d in batch], "text": [d["text"] for d in batch]},
                                        schema=schema))
            count += len(batch)
    return count


def write_file_atomically(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Call `write(f)` to fill the file at `path` (local or URL); a reader never sees a torn file."""
    fs, target = url_to_fs(str(path))
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



def write_json_atomically(path: str, value: Any) -> str:
    """Write a small JSON file whole (see write_file_atomically); returns the sha256 of its bytes."""
    data = json.dumps(value, indent=1, sort_keys=True).encode("utf-8")
    write_file_atomically(path, lambda f: f.write(data))
    return hashlib.sha256(data).hexdigest()


def remove_stale_temporaries(root: str, markers: tuple[str, ...] = (".tmp-", ".partial-")) -> int:
    """Delete temporary files a killed earlier attempt left under `root`; returns how many.

    Call at the start of a step, before any worker writes: the step owns its output directory,
    except dot-directories such as `.executor/` (the executor's own files), which are left alone.
    """
    fs, path = url_to_fs(root)
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
    """A JSON file's value, or None when it does not exist (the whole object in one read: on GCS one
    GET, no metadata request first; not a ranged read, which an empty object refuses)."""
    fs, target = url_to_fs(path)
    try:
        return json.loads(fs.cat_file(target))
    except FileNotFoundError:
        return None
