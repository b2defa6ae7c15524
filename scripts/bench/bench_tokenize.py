"""Tokenize throughput end to end: our tokenize step vs `datasets.map(batched=True, num_proc=2)`.

    uv run --extra bench python scripts/bench/bench_tokenize.py [--size-mb 35] [--shards 8] [--unicode]

`--unicode` rewrites the corpus into text full of non-ASCII characters (accented words, symbols,
CJK sentences, emoji, "©" footers; the share of non-ASCII bytes is printed) so that the figure
means something for real-world text, not only ASCII.

Same input (the generated corpus as plain .jsonl shards), same tokenizer.json (trained once,
outside the timing, on the same corpus), all documents in one split. Ours: JSONL -> token cache
(.npy shards + ledger), in-process on one core, or with `--ray N` its shards on a local Ray
cluster of N CPUs (the default runner of an experiment; started before the timing).
Anchor: `load_dataset("json")` + `.map(encode_batch_fast, batched=True, num_proc=2)`, into its
Arrow cache. Token ids must be identical (each document's ids followed by EOS, in corpus order).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import numpy as np
from data_bench_common import (SCRATCH, bench_corpus, corpus_parser, report, report_cpu, start_ray_for_ours, timed,
                               warm_imports)


def plain_jsonl_copy(input_dir: str) -> str:
    """The corpus shards decompressed to .jsonl (what `datasets`' JSON loader reads without extras)."""
    from steps.documents import list_document_files, read_documents, write_documents

    out = Path(input_dir).parent / "plain"
    if not out.exists():
        for path in list_document_files(input_dir):
            write_documents(str(out / (Path(path).name.removesuffix(".zst"))), read_documents(path))
    return str(out)


_ACCENTED = str.maketrans({"a": "á", "e": "é", "i": "ï", "o": "ö", "u": "ü", "c": "ç", "n": "ñ", "s": "ß"})
_CJK = ["日本語のテキストです。", "这是一个中文句子。", "한국어 문장입니다.", "東京都の天気は晴れ。", "数据去重与分词。"]
_SYMBOLS = ["©", "®", "€", "—", "…", "→", "±", "°C", "µm", "½", "™", "«", "»"]
_EMOJI = ["😀", "🎭", "🚀", "👍🏽", "❤️", "🇫🇷", "🤖"]


def unicode_copy(input_dir: str, seed: int = 0) -> tuple[str, float]:
    """The corpus rewritten with accents, symbols, CJK and emoji; (directory, non-ASCII byte share)."""
    import random

    from steps.documents import list_document_files, read_documents, write_documents

    out = Path(input_dir).parent / "unicode"
    rng = random.Random(seed)

    def rewrite(text: str) -> str:
        words = text.split(" ")
        for i in range(len(words)):
            r = rng.random()
            if r < 0.25:
                words[i] = words[i].translate(_ACCENTED)
            elif r < 0.30:
                words[i] = rng.choice(_CJK)
            elif r < 0.33:
                words[i] += rng.choice(_SYMBOLS)
            elif r < 0.35:
                words[i] += rng.choice(_EMOJI)
        return " ".join(words) + f"\n© {rng.randint(1990, 2026)} Société Générale — «Tous droits réservés» 🔒"

    if not out.exists():
        for path in list_document_files(input_dir):
            write_documents(str(out / Path(path).name),
                            ({**d, "text": rewrite(d["text"])} for d in read_documents(path)))
    total = non_ascii = 0
    for path in list_document_files(str(out)):
        for doc in read_documents(path):
            data = doc["text"].encode("utf-8")
            total += len(data)
            non_ascii += sum(1 for b in data if b >= 0x80)
    return str(out), non_ascii / max(1, total)


def training_tokenizer(input_dir: str, vocab_size: int) -> str:
    from steps.bpe import train_byte_level_bpe
    from steps.documents import list_document_files, read_documents

    path = Path(input_dir).parent / f"tokenizer-{Path(input_dir).name}-{vocab_size}.json"
    if not path.exists():
        texts = (d["text"] for f in list_document_files(input_dir) for d in read_documents(f))
        train_byte_level_bpe(texts, vocab_size, min_frequency=2).save(str(path))
    return str(path)


def run_ours(input_dir: str, tokenizer_path: str, out: str, shards: int) -> np.ndarray:
    from steps.token_cache import TokenSplit
    from steps.tokenize import TokenizeConfig, tokenize

    tokenize(TokenizeConfig(input_dir, out, tokenizer_path=tokenizer_path, validation_fraction=0.0,
                            num_output_shards=shards))
    split = TokenSplit.open(out, "train")
    return split.window(0, split.num_tokens)


def run_datasets(input_dir: str, tokenizer_path: str, cache: str) -> list[list[int]]:
    from datasets import load_dataset
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    files = sorted(str(p) for p in Path(input_dir).glob("*.jsonl"))
    dataset = load_dataset("json", data_files=files, split="train", cache_dir=cache)

    def encode(batch):
        return {"input_ids": [e.ids for e in tokenizer.encode_batch_fast(batch["text"])]}

    tokenized = dataset.map(encode, batched=True, num_proc=2, remove_columns=dataset.column_names)
    return tokenized["input_ids"]


def main() -> None:
    parser = corpus_parser(__doc__)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--unicode", action="store_true")
    parser.add_argument("--ray", type=int, default=0, metavar="N",
                        help="run ours on an embedded local Ray cluster of N CPUs (what an experiment's default "
                             "runner gives a step), started before the timing; 0: in-process, one core")
    args = parser.parse_args()
    import subprocess

    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    compressed_dir, truth = bench_corpus(args.size_mb, args.seed, args.shards)
    input_dir = plain_jsonl_copy(compressed_dir)
    if args.unicode:
        input_dir, share = unicode_copy(input_dir, args.seed)
        truth["num_bytes"] = sum(len(d["text"].encode("utf-8")) for p in sorted(Path(input_dir).glob("*.jsonl"))
                                 for d in __import__("steps.documents", fromlist=["x"]).read_documents(str(p)))
        print(f"unicode corpus: {share:.1%} of the text bytes are non-ASCII")
    tokenizer_path = training_tokenizer(input_dir, args.vocab_size)
    print(f"corpus: {truth['num_docs']} docs, {truth['num_bytes'] / 1e6:.1f} MB of text in {args.shards} .jsonl "
          f"shards; tokenizer {tokenizer_path} (vocab {args.vocab_size})")
    warm_imports("steps.tokenize", "steps.token_cache", "datasets")
    start_ray_for_ours(args.ray)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-tokenize-", dir=SCRATCH)
    times: dict[str, float] = {}
    try:
        with timed("ours", times):
            ours = run_ours(input_dir, tokenizer_path, f"{work}/ours", args.shards)
        with timed("datasets", times):
            theirs = run_datasets(input_dir, tokenizer_path, f"{work}/hf-cache")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    from tokenizers import Tokenizer
    eos = Tokenizer.from_file(tokenizer_path).token_to_id("<|endoftext|>")
    expected = np.fromiter(itertools.chain.from_iterable(ids + [eos] for ids in theirs), np.int64)
    print(f"  tokens: ours {len(ours):,}, datasets {len(expected):,} (+EOS per doc); "
          f"identical token ids: {np.array_equal(ours, expected)}")
    report("tokenize end to end (MB/s)", times["ours"], times["datasets"], "datasets", truth["num_bytes"] / 1e6,
           "MB", 2.0)
    report_cpu(times, "datasets")


if __name__ == "__main__":
    main()
