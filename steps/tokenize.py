"""The tokenize step: JSONL documents -> a token cache (format in steps/token_cache.py).

1. Tokenizer: reuse `<output>/tokenizer.json` when resuming, else load `tokenizer_path`, else
   train a byte-level BPE on (up to `max_tokenizer_training_bytes` of) the training documents.
2. Plan: count the records of every input file (from its by-file result when there is one); cut
   the global record order (files sorted by path, then line order) into `num_output_shards`
   contiguous ranges.
3. Encode, shard by shard in parallel: each document goes to "validation" when a hash of its id
   falls under `validation_fraction`, else to "train"; EOS follows every document. A shard writes
   its arrays, then `shards/<name>.json`; a shard whose marker exists is not redone on resume.
4. Ledger: the committed shards, in order, form each split's token stream. The stream is the
   same whatever the number of output shards or workers.
With `num_output_shards=0` each input file is one output shard named after the file, and a shard's
result is addressed by the tokenizer, the split settings, this code and the file's bytes
(steps/shard_reuse.py): a later run under a new id copies every unchanged file's result from an
earlier output of the step (checked against its recorded sha256) and encodes only new or changed
files; the output is byte-identical to a full run.
With `num_output_shards > 0` (and `on_bad_line="error"`) each input file is encoded on its own into
`by-file/` (its arrays, each document's split in `by-file/splits/<file>.npy`, addressed and reused
the same way), then step 3 becomes an assembly: each output shard's record range is cut from the
files' arrays (numpy slices, no tokenizing). A grown corpus moves every later shard boundary, but
only its new or changed files are encoded. The price: the output holds the token arrays twice.
Input and output may be local paths or fsspec URLs (gs://, s3://).
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.tokenize", DATA)

import functools
import hashlib
import itertools
import sys
from dataclasses import dataclass
from typing import Any, Callable


from executor import Progress, execution_only, map_shards, url_to_fs
import numpy as np
import xxhash

from steps import bpe, documents, shard_reuse, token_cache
from steps.bpe import DEFAULT_EOS, BatchEncoder, eos_id_of, load_tokenizer_json, train_byte_level_bpe
from steps.documents import (BadInputError, DocumentShard, OnBadLine, ReadStats, count_records,
                             list_document_files, read_document_blocks, read_documents, read_json,
                             remove_stale_temporaries,
                             shard_names, write_file_atomically, write_json_atomically)

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class TokenizeConfig:
    input_path: str
    output_path: str
    vocab_size: int = 8192
    """Size of the BPE vocabulary to train (ignored when tokenizer_path is given)."""
    tokenizer_path: str | None = None
    """An existing tokenizer.json to use instead of training one."""
    validation_fraction: float = 0.01
    split_seed: int = 0
    num_output_shards: int = 8
    """Output shards, cut from the global record order; 0: one per input file, named after it.
    Either way unchanged files' results are reused from earlier runs of the step (incremental; with
    > 0 only under on_bad_line="error", through per-file results under by-file/)."""
    eos_token: str = DEFAULT_EOS
    max_tokenizer_training_bytes: int = 200_000_000
    min_pair_frequency: int = 2
    on_bad_line: OnBadLine = "error"
    batch_docs: int = execution_only(1024)
    fast_ascii_encoding: bool = execution_only(True)
    """Encode through steps.bpe.BatchEncoder (same ids as HF, faster; any Unicode text, and huge
    documents piece by piece in bounded memory)."""
    batch_chars: int = execution_only(8 << 20)
    """A batch is encoded once it holds this many characters (or batch_docs documents)."""
    num_cpus_per_shard: float = execution_only(1)

    def __post_init__(self) -> None:
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(f"TokenizeConfig.validation_fraction={self.validation_fraction!r}: use a value in [0, 1)")
        if self.num_output_shards < 0:
            raise ValueError(f"TokenizeConfig.num_output_shards={self.num_output_shards!r}: must be >= 1, "
                             f"or 0 for one output shard per input file")


def is_validation(doc_id: str, fraction: float, seed: int) -> bool:
    """The deterministic train/validation assignment of a document, by a hash of its id."""
    return xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"), seed=seed) < fraction * 2.0 ** 64


@dataclass
class _ShardJob:
    name: str
    pieces: list[tuple[str, int, int]]   # (file, first record, end record)
    output_path: str
    tokenizer_json: str
    config: TokenizeConfig
    address: str | None = None
    """With num_output_shards=0: the shard's result address (steps/shard_reuse.py)."""
    sources: tuple[str, ...] = ()
    """Earlier outputs of this step to reuse the shard's result from."""
    folder: str = ""
    """Where under the output its files go: "" (an output shard) or BY_FILE (one input file's
    arrays and its documents' splits, cut into output shards by `_assemble_shard`)."""


BY_FILE = "by-file"


@dataclass
class _AssembleJob:
    name: str
    pieces: list[tuple[str, int, int]]   # (input file's name under by-file/, first document, end document)
    output_path: str
    dtype: str                           # the token ids' dtype (token_cache.token_dtype)


def tokenize(config: TokenizeConfig) -> dict[str, Any]:
    out = config.output_path.rstrip("/")
    files = list_document_files(config.input_path)
    remove_stale_temporaries(out)
    tokenizer_json = _tokenizer(config, files, out)
    if config.num_output_shards == 0:
        jobs = _jobs_per_file(config, files, out, tokenizer_json)
        results = map_shards(_tokenize_shard, jobs, desc="tokenize: shards", num_cpus=config.num_cpus_per_shard)
        per_file = results
    elif _by_file(config):
        results, per_file = _assembled(config, files, out, tokenizer_json)
    else:
        counts = map_shards(count_records, files, desc="tokenize: count records")
        _check_documents(config, files, counts)
        jobs = [_ShardJob(name, pieces, out, tokenizer_json, config)
                for name, pieces in _plan_shards(files, counts, config.num_output_shards)]
        results = map_shards(_tokenize_shard, jobs, desc="tokenize: shards", num_cpus=config.num_cpus_per_shard)
        per_file = []
    ledger = _ledger(results, tokenizer_json, config)
    if sum(s["docs"] for s in ledger["splits"].values()) == 0:
        raise BadInputError(f"input {config.input_path!r}: {len(files)} file(s) but no documents; nothing to tokenize")
    write_json_atomically(token_cache.join(out, "ledger.json"), ledger)
    if ledger["splits"]["train"]["docs"] == 0:
        raise BadInputError(f"input {config.input_path!r}: no documents reached the train split")
    return {
        "documents": sum(s["docs"] for s in ledger["splits"].values()),
        "train_documents": ledger["splits"]["train"]["docs"],
        "validation_documents": ledger["splits"]["validation"]["docs"],
        "train_tokens": ledger["splits"]["train"]["tokens"],
        "validation_tokens": ledger["splits"]["validation"]["tokens"],
        "text_bytes": sum(s["bytes"] for s in ledger["splits"].values()),
        "vocab_size": ledger["vocab_size"],
        "skipped_lines": sum(r["skipped_lines"] for r in results),
        "shards": len(results),
        "shards_resumed": sum(bool(r["resumed"]) for r in results),
        **_reuse_counts(per_file if per_file else results),
    }


def _by_file(config: TokenizeConfig) -> bool:
    """Whether output shards are assembled from per-file results (reused across runs): with
    num_output_shards > 0 and every line a document (a skipped line would shift record ranges)."""
    return config.num_output_shards > 0 and config.on_bad_line == "error"


def _reuse_counts(results: list[dict]) -> dict[str, int]:
    """Reused and processed units: output shards (num_output_shards=0), or input files (by-file)."""
    return {"shards_reused": sum(bool(r.get("reused")) for r in results),
            "shards_processed": sum(not r["resumed"] and not r.get("reused") for r in results)}


def _check_documents(config: TokenizeConfig, files: list[str], counts: list[int]) -> None:
    if sum(counts) == 0:
        raise BadInputError(f"input {config.input_path!r}: {len(files)} file(s) but no documents; "
                            f"nothing to tokenize")


def _assembled(config: TokenizeConfig, files: list[str], out: str, tokenizer_json: str) -> tuple[list[dict], list[dict]]:
    """(output shards' results, input files' results): each file encoded (or reused) into by-file/,
    then the fixed number of output shards cut from those arrays."""
    file_jobs = _jobs_per_file(config, files, out, tokenizer_json, BY_FILE)
    per_file = map_shards(_tokenize_shard, file_jobs, desc="tokenize: input files", num_cpus=config.num_cpus_per_shard)
    counts = [sum(r["splits"][split]["docs"] for split in SPLITS) for r in per_file]
    _check_documents(config, files, counts)
    names = {job.pieces[0][0]: job.name for job in file_jobs}
    from tokenizers import Tokenizer

    dtype = token_cache.token_dtype(Tokenizer.from_str(tokenizer_json).get_vocab_size()).name
    jobs = [_AssembleJob(name, [(names[path], first, end) for path, first, end in pieces], out, dtype)
            for name, pieces in _plan_shards(files, counts, config.num_output_shards)]
    return map_shards(_assemble_shard, jobs, desc="tokenize: output shards"), per_file


def _jobs_per_file(config: TokenizeConfig, files: list[str], out: str, tokenizer_json: str,
                   folder: str = "") -> list[_ShardJob]:
    """One job per input file, each with its result's address and the earlier outputs to look in."""
    names = shard_names([DocumentShard(f) for f in files])
    digests = shard_reuse.input_digests(out, files, "tokenize: input digests")
    sources = tuple(shard_reuse.sources(out))
    addresses = _addresses(config, files, digests, tokenizer_json, folder)
    return [_ShardJob(name, [(path, 0, -1)], out, tokenizer_json, config, address, sources, folder)
            for name, path, address in zip(names, files, addresses)]


def _addresses(config: TokenizeConfig, files: list[str], digests: list[str], tokenizer_json: str,
               folder: str = "") -> list[str]:
    """The result address of each input file's shard (num_output_shards=0), or of its arrays under
    `folder` (BY_FILE: a different set of files, so a different address)."""
    code = shard_reuse.code_digest([sys.modules[__name__], token_cache, bpe, documents],
                                   ["tokenizers", "numpy", "xxhash"])
    settings = {"tokenizer_sha256": hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest(),
                "validation_fraction": config.validation_fraction, "split_seed": config.split_seed,
                "eos_token": config.eos_token, "on_bad_line": config.on_bad_line,
                **({"layout": folder} if folder else {})}
    names = shard_names([DocumentShard(f) for f in files])
    # a skipped line's example names the file's path, which differs between upstream outputs
    return [shard_reuse.shard_address("tokenize", code, settings,
                                      {"name": name, "sha256": digest,
                                       **({"path": path} if config.on_bad_line == "skip" else {})})
            for name, path, digest in zip(names, files, digests)]


def forecast_shards(config: TokenizeConfig, checksums: dict[str, dict[str, str]]) -> tuple[int, int] | str | None:
    """A dry run's forecast (docs/steps.md): (shards whose stored result it expects to reuse, shards),
    from the upstream manifest's checksums and listings of the earlier outputs' shard indexes; or
    why it cannot say; None when the step is not incremental (num_output_shards > 0 with
    on_bad_line="skip")."""
    if config.num_output_shards != 0 and not _by_file(config):
        return None
    if config.tokenizer_path is None:
        return "not forecast: the tokenizer is trained on the input (give tokenizer_path to reuse shards)"
    files = list_document_files(config.input_path)
    digests = shard_reuse.sha256_of(checksums, files, config.output_path)
    if isinstance(digests, str):
        return f"not forecast: {digests}"
    _, text = load_tokenizer_json(config.tokenizer_path)
    stored = shard_reuse.stored_addresses(config.output_path)
    folder = BY_FILE if _by_file(config) else ""
    return sum(a in stored for a in _addresses(config, files, digests, text, folder)), len(files)


tokenize.shard_forecast = forecast_shards  # type: ignore[attr-defined]  # read by the dry run (executor.tools.shard_forecast)


def _tokenizer(config: TokenizeConfig, files: list[str], out: str) -> str:
    """The tokenizer.json text for this step, written to `<output>/tokenizer.json` first."""
    target = token_cache.join(out, "tokenizer.json")
    fs, path = url_to_fs(target)
    if fs.exists(path):  # resuming: never retrain, the committed shards were encoded with this one
        return fs.read_text(path, encoding="utf-8")
    if config.tokenizer_path is not None:
        tokenizer, text = load_tokenizer_json(config.tokenizer_path)
        eos_id_of(tokenizer, config.eos_token, f"tokenizer_path {config.tokenizer_path!r}")
    else:
        tokenizer = train_byte_level_bpe(_training_texts(config, files), config.vocab_size,
                                         config.eos_token, min_frequency=config.min_pair_frequency)
        text = tokenizer.to_str()
    write_file_atomically(target, lambda f: f.write(text.encode("utf-8")))
    return text


def _training_texts(config: TokenizeConfig, files: list[str]):
    budget = config.max_tokenizer_training_bytes
    progress = Progress("tokenize: train tokenizer on", unit="bytes")
    for path in files:
        for doc in read_documents(path, config.on_bad_line):
            if is_validation(doc["id"], config.validation_fraction, config.split_seed):
                continue
            size = len(doc["text"].encode("utf-8"))
            if size > budget:
                progress.close()
                return
            budget -= size
            progress.update(size)
            yield doc["text"]
    progress.close()


def _plan_shards(files: list[str], counts: list[int], num_shards: int) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """Contiguous ranges of the global record order, as (file, start, end) pieces per shard."""
    file_starts = np.cumsum([0] + counts)
    bounds = np.linspace(0, file_starts[-1], num_shards + 1).astype(np.int64)
    plan = []
    for k in range(num_shards):
        lo, hi = bounds[k], bounds[k + 1]
        pieces = [(f, int(max(lo, s) - s), int(min(hi, s + n) - s))
                  for f, s, n in zip(files, file_starts[:-1], counts) if max(lo, s) < min(hi, s + n)]
        plan.append((f"{k:05d}-of-{num_shards:05d}", pieces))
    return plan


class _SplitBuffer:
    """One split's documents of a shard: token ids with EOS after each document, their counts and
    UTF-8 byte lengths, as numpy arrays (one per batch)."""

    def __init__(self) -> None:
        self.tokens: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.doc_bytes: list[np.ndarray] = []

    def add(self, tokens: np.ndarray, counts: np.ndarray, byte_lengths: np.ndarray, eos_id: int,
            dtype: np.dtype) -> None:
        """Documents given as their ids concatenated and the number of ids of each."""
        if len(counts) == 0:
            return
        eos_at = np.cumsum(counts + 1) - 1
        flat = np.full(len(tokens) + len(counts), eos_id, dtype)
        keep = np.ones(len(flat), bool)
        keep[eos_at] = False
        flat[keep] = tokens
        self.tokens.append(flat)
        self.lengths.append(counts + 1)
        self.doc_bytes.append(byte_lengths)

    def write(self, split_dir: str, name: str, dtype: np.dtype, digests: dict[str, str] | None = None) -> dict:
        tokens = np.concatenate(self.tokens) if self.tokens else np.zeros(0, dtype)
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        doc_bytes = np.concatenate(self.doc_bytes) if self.doc_bytes else np.zeros(0, np.int64)
        return token_cache.write_shard(split_dir, name, tokens, offsets, doc_bytes.astype(np.int64), digests)


@functools.lru_cache(maxsize=1)
def _process_encoder(tokenizer_json: str) -> BatchEncoder:
    """One encoder per process and tokenizer: a worker's pre-token cache and checked characters
    stay warm from one shard to the next instead of starting cold on each."""
    return BatchEncoder(tokenizer_json)


def _tokenize_shard(job: _ShardJob) -> dict[str, Any]:
    at = f"{job.folder}/" if job.folder else ""
    marker = token_cache.join(job.output_path, at, "shards", f"{job.name}.json")
    files = [f"{at}{split}/{job.name}.{kind}.npy" for split in SPLITS for kind in ("tokens", "offsets", "bytes")]
    if job.folder:
        files.append(f"{at}splits/{job.name}.npy")
    files.append(f"{at}shards/{job.name}.json")  # the marker last: copied last on reuse
    committed = read_json(marker)
    if committed is not None:
        if job.address is not None:  # a run killed between the marker and its index entry
            shard_reuse.record_if_missing(job.output_path, job.address, files, committed)
        return {**committed, "resumed": True}
    if job.address is None:
        result = _encode_shard(job)
        write_json_atomically(marker, result)
        return {**result, "resumed": False}

    def make() -> dict[str, Any]:
        digests: dict[str, str] = {}  # hashed as written: the index entry reads nothing back
        made = _encode_shard(job, digests)
        digests[files[-1]] = write_json_atomically(marker, made)
        shard_reuse.record(job.output_path, job.address, files, made, digests)
        return made

    result, made_here = shard_reuse.reuse_or_make(job.output_path, job.address, list(job.sources), make)
    return {**result, "resumed": False, **({} if made_here else {"reused": True})}


def _encode_shard(job: _ShardJob, digests: dict[str, str] | None = None) -> dict[str, Any]:
    """Encode one shard's documents and write its arrays; returns its marker's content. `digests`,
    when given, gets the sha256 of each file written, by its path under the output."""
    config = job.config
    encode, tokenizer = _encoder(job.tokenizer_json, config.fast_ascii_encoding)
    eos_id = eos_id_of(tokenizer, config.eos_token, "tokenizer.json")
    dtype = token_cache.token_dtype(tokenizer.get_vocab_size())
    buffers = {split: _SplitBuffer() for split in SPLITS}
    stats = ReadStats()
    flags: list[np.ndarray] = []  # each document's split (1: validation), kept for by-file results

    def flush(texts: list[str], validation: list[bool]) -> None:
        tokens, counts = encode(texts)
        byte_lengths = np.fromiter((len(t.encode("utf-8")) for t in texts), np.int64, len(texts))
        chosen = np.asarray(validation, bool)
        flags.append(chosen)
        if not chosen.any():
            buffers["train"].add(tokens, counts, byte_lengths, eos_id, dtype)
            return
        of_token = np.repeat(chosen, counts)
        for split, docs, ids in (("train", ~chosen, ~of_token), ("validation", chosen, of_token)):
            buffers[split].add(tokens[ids], counts[docs], byte_lengths[docs], eos_id, dtype)

    texts: list[str] = []
    validation: list[bool] = []
    chars = 0
    for path, first, end in job.pieces:
        records = (first, None if end < 0 else end)  # end -1: to the end of the file
        for block in read_document_blocks(path, config.on_bad_line, stats, records=records):
            for doc in block:
                texts.append(doc["text"])
                validation.append(config.validation_fraction > 0 and
                                  is_validation(doc["id"], config.validation_fraction, config.split_seed))
                chars += len(doc["text"])
                if len(texts) >= config.batch_docs or chars >= config.batch_chars:
                    flush(texts, validation)
                    texts, validation, chars = [], [], 0
    if texts:
        flush(texts, validation)
    root, at, written = token_cache.join(job.output_path, job.folder), f"{job.folder}/" if job.folder else "", {}
    entries = {}
    for split in SPLITS:
        hashed: dict[str, str] = {}
        entries[split] = buffers[split].write(token_cache.join(root, split), job.name, dtype, hashed)
        written.update({f"{at}{split}/{name}": sha for name, sha in hashed.items()})
    if job.folder:
        chosen = np.concatenate(flags) if flags else np.zeros(0, bool)
        written[f"{at}splits/{job.name}.npy"] = token_cache.save_array_atomically(
            token_cache.join(root, "splits", f"{job.name}.npy"), chosen.astype(np.uint8))
    if digests is not None:
        digests.update(written)
    return {"schema": 1, "shard": job.name, "splits": entries, "skipped_lines": stats.skipped_lines,
            "skipped_examples": stats.skip_examples}


def _assemble_shard(job: _AssembleJob) -> dict[str, Any]:
    """Cut one output shard's documents from the input files' arrays under by-file/ and write its
    arrays and marker: the same bytes as encoding its record range directly."""
    marker = token_cache.join(job.output_path, "shards", f"{job.name}.json")
    committed = read_json(marker)
    if committed is not None:
        return {**committed, "resumed": True}
    parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {split: [] for split in SPLITS}
    for name, first, end in job.pieces:
        flags = token_cache.load_array(token_cache.join(job.output_path, BY_FILE, "splits", f"{name}.npy"))
        validation = np.concatenate([[0], np.cumsum(flags[:end], dtype=np.int64)])  # validation documents before each
        ranges = {"validation": (validation[first], validation[end]),
                  "train": (first - validation[first], end - validation[end])}
        for split, (lo, hi) in ranges.items():
            if hi > lo:
                parts[split].append(_cut(token_cache.join(job.output_path, BY_FILE, split), name, int(lo), int(hi)))
    entries = {split: _write_cut(job.output_path, split, job.name, parts[split], np.dtype(job.dtype))
               for split in SPLITS}
    result = {"schema": 1, "shard": job.name, "splits": entries, "skipped_lines": 0, "skipped_examples": []}
    write_json_atomically(marker, result)
    return {**result, "resumed": False}


def _cut(split_dir: str, name: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token ids, ids per document, UTF-8 bytes per document) of documents lo..hi-1 of a file's split."""
    offsets = token_cache.load_array(token_cache.join(split_dir, f"{name}.offsets.npy"))
    tokens = token_cache.load_array(token_cache.join(split_dir, f"{name}.tokens.npy"), ranged=True)
    doc_bytes = token_cache.load_array(token_cache.join(split_dir, f"{name}.bytes.npy"))
    return (np.asarray(tokens[int(offsets[lo]):int(offsets[hi])]), np.diff(offsets[lo:hi + 1]),
            np.asarray(doc_bytes[lo:hi]))


def _write_cut(out: str, split: str, name: str, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
               dtype: np.dtype) -> dict:
    tokens = np.concatenate([p[0] for p in parts]).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
    lengths = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    doc_bytes = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
    return token_cache.write_shard(token_cache.join(out, split), name, tokens, offsets, doc_bytes.astype(np.int64))


def _encoder(tokenizer_json: str, fast: bool) -> tuple[Callable[[list[str]], tuple[np.ndarray, np.ndarray]], Any]:
    """(texts -> (ids concatenated, ids per text), the HF tokenizer): this process's BatchEncoder,
    or HF's `encode_batch_fast` when `fast` is off."""
    encoder = _process_encoder(tokenizer_json)
    if fast:
        return encoder.encode_batch_flat, encoder.tokenizer

    def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [e.ids for e in encoder.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        counts = np.fromiter(map(len, ids), np.int64, len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), np.uint32, int(counts.sum())), counts
    return encode, encoder.tokenizer


def _ledger(results: list[dict], tokenizer_json: str, config: TokenizeConfig) -> dict:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    splits = {}
    for split in SPLITS:
        shards = [r["splits"][split] for r in results if r["splits"][split]["docs"] > 0]
        splits[split] = {"docs": sum(s["docs"] for s in shards), "tokens": sum(s["tokens"] for s in shards),
                         "bytes": sum(s["bytes"] for s in shards), "shards": shards}
    vocab_size = tokenizer.get_vocab_size()
    return {
        "schema": token_cache.LEDGER_SCHEMA,
        "tokenizer_sha256": hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest(),
        "vocab_size": vocab_size,
        "eos_id": eos_id_of(tokenizer, config.eos_token, "tokenizer.json"),
        "dtype": token_cache.token_dtype(vocab_size).name,
        "splits": splits,
    }
