"""Which documents made step N: rebuild a train step's batch from its output and list, per row,
the documents (shard, index, global index) and token ranges inside each document it holds.

    python -m steps.train.batch_documents <train output path> <step> [--json]

Step N is the step as numbered in metrics.jsonl (1-based: the Nth update, which used batch
N-1). Batches are a pure function of (seed, step), so this needs only the train output's
`data.json` (written by `train`) and the token cache; nothing is replayed.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from executor import url_to_fs
from steps.token_cache import TokenSplit
from steps.train.data import BatchSource

DATA_FILE = "data.json"
DATA_FILE_SCHEMA = 1


def data_description(cache_path: str, seq_len: int, batch_size: int, seed: int, num_steps: int) -> dict:
    return {"schema": DATA_FILE_SCHEMA, "cache_path": cache_path, "split": "train", "seq_len": seq_len,
            "batch_size": batch_size, "seed": seed, "num_steps": num_steps}


def read_data_description(train_output: str) -> dict:
    path = f"{train_output.rstrip('/')}/{DATA_FILE}"
    fs, p = url_to_fs(path)
    try:
        meta = json.loads(fs.cat_file(p))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: not found; is {train_output} the output of a train step?") from None
    if meta.get("schema", 0) > DATA_FILE_SCHEMA:
        raise ValueError(f"{path}: schema {meta['schema']} is newer than this code knows ({DATA_FILE_SCHEMA})")
    return meta


def _document_starts(split: TokenSplit) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """First stream token of every document, and its (shard name, index within shard)."""
    starts, names, base = [], [], 0
    shard_names = [s["name"] for s in _ledger_shards(split)]
    for name, off in zip(shard_names, split.offsets):
        off = np.asarray(off)
        starts.append(off[:-1] + base)
        names.extend((name, i) for i in range(len(off) - 1))
        base += int(off[-1])
    return (np.concatenate(starts) if starts else np.zeros(0, np.int64)), names


def _ledger_shards(split: TokenSplit) -> list[dict]:
    from steps.token_cache import read_ledger
    return read_ledger(split.root)["splits"][split.split]["shards"]


def batch_documents(train_output: str, step: int) -> dict:
    """{step, batch_index, rows: [{row, stream_start, documents: [{global_index, shard, index,
    token_start, token_end}]}]}; token ranges are [start, end) within the document."""
    meta = read_data_description(train_output)
    if not 1 <= step <= meta["num_steps"]:
        raise ValueError(f"step={step} is outside 1..{meta['num_steps']} (steps as numbered in metrics.jsonl)")
    split = TokenSplit.open(meta["cache_path"], meta["split"])
    source = BatchSource(split, meta["seq_len"], meta["batch_size"], meta["seed"])
    doc_starts, names = _document_starts(split)
    doc_ends = np.append(doc_starts[1:], split.num_tokens)
    rows = []
    for row, start in enumerate(source.window_starts(step - 1)):
        start, end = int(start), int(start) + source.window_len
        first = int(np.searchsorted(doc_starts, start, side="right") - 1)
        last = int(np.searchsorted(doc_starts, end - 1, side="right") - 1)
        docs = []
        for g in range(first, last + 1):
            lo, hi = max(start, int(doc_starts[g])), min(end, int(doc_ends[g]))
            shard, index = names[g]
            docs.append({"global_index": g, "shard": shard, "index": index,
                         "token_start": lo - int(doc_starts[g]), "token_end": hi - int(doc_starts[g])})
        rows.append({"row": row, "stream_start": start, "documents": docs})
    return {"step": step, "batch_index": step - 1, "cache_path": meta["cache_path"], "rows": rows}


def format_table(result: dict) -> str:
    lines = [f"step {result['step']} (batch {result['batch_index']}) from {result['cache_path']}",
             f"{'row':>4}  {'doc':>7}  {'shard':<16} {'index':>6}  tokens"]
    for row in result["rows"]:
        for doc in row["documents"]:
            lines.append(f"{row['row']:>4}  {doc['global_index']:>7}  {doc['shard']:<16} {doc['index']:>6}  "
                         f"[{doc['token_start']}, {doc['token_end']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m steps.train.batch_documents", description=__doc__.splitlines()[0])
    parser.add_argument("train_output", help="a train step's output path (local, gs://, s3://)")
    parser.add_argument("step", type=int, help="step number as in metrics.jsonl (1-based)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        result = batch_documents(args.train_output, args.step)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"batch_documents: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
