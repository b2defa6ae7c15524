"""A small synthetic token cache (same format as the tokenize step's) for tests and benchmarks.

Text comes from a tiny random grammar, so it has structure a model can learn beyond unigram
statistics; a byte-level BPE is trained on it with HF `tokenizers` and written as tokenizer.json.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from steps.token_cache import LEDGER_SCHEMA, token_dtype, write_shard

EOS = "<|endoftext|>"
_SUBJECTS = ["the king", "the queen", "a fool", "my lord", "the ghost", "sweet juliet", "good romeo", "the duke"]
_VERBS = ["doth love", "shall slay", "hath seen", "would praise", "must follow", "doth fear", "will greet"]
_OBJECTS = ["the crown", "his sword", "the moon", "her father", "this castle", "the stars", "thy heart"]
_ENDINGS = [".", "!", "?", ", and so it goes."]


def synthetic_documents(n_docs: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(int(rng.integers(2, 6))):
            s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}{rng.choice(_ENDINGS)}"
            sentences.append(s[0].upper() + s[1:])
        docs.append(" ".join(sentences))
    return docs


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def write_cache(root: str | Path, splits: dict[str, list[str]], vocab_size: int = 300,
                docs_per_shard: int = 200) -> Path:
    """Tokenize `splits` ({split: texts}) into a token cache at `root`; returns root."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(splits.get("train") or next(iter(splits.values())), vocab_size)
    tok.save(str(root / "tokenizer.json"))
    eos_id = tok.token_to_id(EOS)
    vocab = tok.get_vocab_size()
    ledger = {"schema": LEDGER_SCHEMA, "vocab_size": vocab, "eos_id": eos_id, "dtype": token_dtype(vocab).name,
              "tokenizer_sha256": hashlib.sha256((root / "tokenizer.json").read_bytes()).hexdigest(),
              "splits": {}}
    for split, texts in splits.items():
        shards = []
        for first in range(0, len(texts), docs_per_shard):
            chunk = texts[first:first + docs_per_shard]
            ids = [e.ids + [eos_id] for e in tok.encode_batch(chunk, add_special_tokens=False)]
            offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])]).astype(np.int64)
            tokens = np.concatenate(ids).astype(token_dtype(vocab))
            doc_bytes = np.array([len(t.encode("utf-8")) for t in chunk], np.int64)
            shards.append(write_shard(root / split, f"shard-{first // docs_per_shard:05d}", tokens, offsets, doc_bytes))
        ledger["splits"][split] = {"docs": sum(s["docs"] for s in shards), "tokens": sum(s["tokens"] for s in shards),
                                   "bytes": sum(s["bytes"] for s in shards), "shards": shards}
    (root / "ledger.json").write_text(json.dumps(ledger, indent=1))
    return root


def write_synthetic_cache(root: str | Path, n_train: int = 400, n_validation: int = 40, seed: int = 0,
                          vocab_size: int = 300) -> Path:
    docs = synthetic_documents(n_train + n_validation, seed)
    return write_cache(root, {"train": docs[:n_train], "validation": docs[n_train:]}, vocab_size)
