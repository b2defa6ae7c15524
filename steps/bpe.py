"""Byte-level BPE tokenizers with HF `tokenizers`: train one offline, load a tokenizer.json, encode fast.

Byte-level BPE without a normaliser round-trips every UTF-8 text exactly: decode(encode(t)) == t.
The end-of-document token is a special token; it must be in the vocabulary.

`BatchEncoder` gives the same ids as `Tokenizer.encode_batch_fast`, several times faster for the
common case: HF's byte-level encoding is a concatenation, over the GPT-2 regex pre-tokens of the
text, of the BPE of each pre-token. For ASCII text that pattern is plain `re` (no Unicode classes),
so we split in Python and look each pre-token's ids up in a cache, asking HF only for pre-tokens
not seen yet. Any text where that equivalence is not certain (non-ASCII or control characters,
an added token's text inside it, a tokenizer with another pre-tokenizer or a normaliser) goes
through HF unchanged.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from typing import Iterable


from executor.engine import location
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

DEFAULT_EOS = "<|endoftext|>"


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int, eos_token: str = DEFAULT_EOS,
                         min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE (GPT-2 style pre-tokenisation) with `eos_token` as its one special token."""
    if vocab_size < 257:
        raise ValueError(f"vocab_size={vocab_size}: a byte-level BPE needs at least 257 ids "
                         f"(256 bytes + the end-of-document token)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=[eos_token], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_tokenizer_json(path: str) -> tuple[Tokenizer, str]:
    """A tokenizer from a tokenizer.json at any fsspec path, with that file's text."""
    try:
        with location.open_file(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"tokenizer_path {path!r} does not exist; point it at a tokenizer.json "
                                f"(e.g. another tokenize step's output) or leave it None to train one") from None
    try:
        return Tokenizer.from_str(text), text
    except Exception as e:  # tokenizers raises a bare Exception on a malformed file
        raise ValueError(f"tokenizer_path {path!r} is not a valid HF tokenizers file: {e}") from None


def eos_id_of(tokenizer: Tokenizer, eos_token: str, where: str) -> int:
    eos_id = tokenizer.token_to_id(eos_token)
    if eos_id is None:
        raise ValueError(f"{where}: the tokenizer has no end-of-document token {eos_token!r}; "
                         f"set eos_token to one of its special tokens")
    return eos_id


# HF ByteLevel's pattern is  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# On text made only of printable ASCII, tab, LF and CR, \p{L} is [A-Za-z], \p{N} is [0-9] and \s is
# [\t\n\r ], which gives this pattern exactly.
_ASCII_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\t\n\r A-Za-z0-9]+"
                             r"|[\t\n\r ]+(?![^\t\n\r ])|[\t\n\r ]+")
_NOT_PLAIN_ASCII = re.compile(r"[^\t\n\r\x20-\x7e]")
_GPT2_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}


class BatchEncoder:
    """`encode_batch(texts) -> ids per text`, identical to `Tokenizer.encode_batch_fast(texts)` ids."""

    def __init__(self, tokenizer_json: str, max_cached_pretokens: int = 1_000_000,
                 tokenizer: Tokenizer | None = None):
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer.from_str(tokenizer_json)
        spec = json.loads(tokenizer_json)
        pre = spec.get("pre_tokenizer") or {}
        eligible = (spec.get("normalizer") is None and spec.get("model", {}).get("type") == "BPE"
                    and not spec["model"].get("dropout")
                    and all(pre.get(k) == v for k, v in _GPT2_BYTE_LEVEL.items()))
        self._added = [t["content"] for t in spec.get("added_tokens", [])]
        self._pieces: Tokenizer | None = None
        if eligible:
            self._pieces = Tokenizer.from_str(tokenizer_json)
            self._pieces.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        self._cache: dict[str, list[int]] = {}
        self._max_cached = max_cached_pretokens

    def _fast_path_applies(self, text: str) -> bool:
        return _NOT_PLAIN_ASCII.search(text) is None and not any(a in text for a in self._added)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self._pieces is None:
            return [e.ids for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        out: list[list[int] | None] = [None] * len(texts)
        slow = [i for i, t in enumerate(texts) if not self._fast_path_applies(t)]
        if slow:
            for i, e in zip(slow, self.tokenizer.encode_batch_fast([texts[i] for i in slow], add_special_tokens=False)):
                out[i] = e.ids
        slow_set = set(slow)
        fast = [i for i in range(len(texts)) if i not in slow_set]
        split = [_ASCII_PRETOKEN.findall(texts[i]) for i in fast]
        if len(self._cache) > self._max_cached:
            self._cache.clear()
        cache = self._cache
        missing = list(set(chain.from_iterable(split)).difference(cache))
        if missing:
            # without the regex, the pre-tokenizer leaves each piece whole: BPE of the piece alone
            encoded = self._pieces.encode_batch_fast(missing, add_special_tokens=False)
            cache.update(zip(missing, (e.ids for e in encoded)))
        lookup = cache.__getitem__
        for i, pieces in zip(fast, split):
            out[i] = list(chain.from_iterable(map(lookup, pieces)))
        return out  # type: ignore[return-value]
