"""Byte-level BPE tokenizers with HF `tokenizers`: train one offline, load a tokenizer.json, encode fast.

Byte-level BPE without a normaliser round-trips every UTF-8 text exactly: decode(encode(t)) == t.
The end-of-document token is a special token; it must be in the vocabulary.

`BatchEncoder` gives the same ids as `Tokenizer.encode_batch_fast`, several times faster for the
common case: HF's byte-level encoding is a concatenation, over the GPT-2 regex pre-tokens of the
text, of the BPE of each pre-token. We split with the same pattern in Python's `re` (explicit
Unicode classes, each character checked against HF's pre-tokenizer once) and look each
pre-token's ids up in a cache, asking HF only for pre-tokens not seen yet. Any text where that
equivalence is not certain (a character the engines classify differently, an added token's text
inside it, a tokenizer with another pre-tokenizer or a normaliser) goes through HF unchanged.
"""

from __future__ import annotations

from steps.extras import DATA, require_extra

require_extra("data", "steps.bpe", DATA)

import array
import collections
import contextvars
import itertools
import functools
import json
import re
import unicodedata
from itertools import chain
from typing import Iterable, Iterator

import numpy as np


from executor import open_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

DEFAULT_EOS = "<|endoftext|>"


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int, eos_token: str = DEFAULT_EOS, *,
                         min_frequency: int) -> Tokenizer:
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
    tokenizer.train_from_iterator(pulled_in_this_context(texts), trainer=trainer)
    return tokenizer


def pulled_in_this_context(items: Iterable[str]) -> Iterator[str]:
    """`items`, each one produced in the caller's context. tokenizers pulls its iterator from a thread
    of its own, where the step's storage options (a context variable the runner sets) are unset: a
    generator reading documents from a bucket would find no credentials there."""
    context, iterator = contextvars.copy_context(), iter(items)

    def pull() -> Iterator[str]:
        while True:
            try:
                yield context.run(next, iterator)
            except StopIteration:
                return
    return pull()


def load_tokenizer_json(path: str) -> tuple[Tokenizer, str]:
    """A tokenizer from a tokenizer.json at any fsspec path, with that file's text."""
    try:
        with open_file(path, "r", encoding="utf-8") as f:
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
# evaluated by Oniguruma. Its matches depend only on each character's class (letter, number,
# whitespace, other), so the same pattern written with explicit character classes in Python's
# `re` splits identically on every text whose characters are classified alike by both engines.
# Python's classes come from `unicodedata`; each character met is checked once against HF's own
# pre-tokenizer (probe strings around it), and a text holding a character that disagrees, or one
# not checkable, goes through HF unchanged.
_GPT2_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
_PROBES = ("a{}a", "1{}1", "!{}!", " {} ", "{}{}", "'{}s")
_LONG_TEXT_CHARS = 1 << 20
# Split points of a long text where every pre-token ends (see _windows): before the space of
# "letter space letter", and after the newline of "printable newline printable" (ASCII neighbours).
_SAFE_SPLIT = re.compile(r"(?<=[A-Za-z]) (?=[A-Za-z])|(?<=[!-~]\n)(?=[!-~])")


@functools.lru_cache(maxsize=1)
def _python_pretoken_pattern() -> tuple[re.Pattern, dict[str, str]]:
    """The ByteLevel pattern with explicit Unicode classes for Python's `re`.

    The classes hold characters of the Basic Multilingual Plane only: `re` tests a class of BMP
    characters with one table lookup, but walks a list of ranges for each class that reaches
    beyond it, which made every split four times slower, on ASCII text too. A letter or number
    beyond the BMP is therefore "other" here; the per-character check finds that HF disagrees,
    and texts holding one go through HF."""
    ranges: dict[str, list[list[int]]] = {"L": [], "N": [], "S": []}
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        c = chr(code)
        category = unicodedata.category(c)
        cls = "L" if category[0] == "L" else "N" if category[0] == "N" else "S" if c.isspace() else None
        if cls is None:
            continue
        spans = ranges[cls]
        if spans and spans[-1][1] == code - 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    classes = {k: _class_body(spans) for k, spans in ranges.items()}
    L, N, S = classes["L"], classes["N"], classes["S"]
    pattern = re.compile(f"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+")
    return pattern, classes


def _class_body(spans: Iterable[tuple[int, int] | list[int]]) -> str:
    """The inside of a regex character class holding the code point ranges `spans` (inclusive)."""
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in spans)


def _spans(chars: Iterable[str]) -> list[list[int]]:
    spans: list[list[int]] = []
    for code in sorted(map(ord, chars)):
        if spans and spans[-1][1] == code - 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return spans


def _windows(text: str, max_chars: int) -> list[tuple[int, int]]:
    """[start, end) pieces of `text`, each ending where a pre-token ends, most under `max_chars`."""
    pieces, start = [], 0
    while len(text) - start > max_chars:
        found = _SAFE_SPLIT.search(text, start + max_chars // 2, start + max_chars)
        if found is None:
            found = _SAFE_SPLIT.search(text, start + max_chars)
            if found is None:
                break
        pieces.append((start, found.start()))
        start = found.start()
    pieces.append((start, len(text)))
    return pieces


class BatchEncoder:
    """`encode_batch(texts) -> ids per text`, identical to `Tokenizer.encode_batch_fast(texts)` ids.

    Texts over `long_text_chars` are encoded piece by piece (split where a pre-token ends, so the
    ids are the same) and come back as a uint32 array, which bounds memory on huge documents."""

    def __init__(self, tokenizer_json: str, max_cached_pretokens: int = 1_000_000,
                 tokenizer: Tokenizer | None = None, long_text_chars: int = _LONG_TEXT_CHARS):
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer.from_str(tokenizer_json)
        spec = json.loads(tokenizer_json)
        pre = spec.get("pre_tokenizer") or {}
        eligible = (spec.get("normalizer") is None and spec.get("model", {}).get("type") == "BPE"
                    and not spec["model"].get("dropout")
                    and all(pre.get(k) == v for k, v in _GPT2_BYTE_LEVEL.items()))
        self._added = [t["content"] for t in spec.get("added_tokens", [])]
        # a split inside an added token's text would change the ids: only split when none can span one
        self._can_split = eligible and not any(any(ch.isspace() for ch in a) for a in self._added)
        self.long_text_chars = long_text_chars
        self._pieces: Tokenizer | None = None
        if eligible:
            self._pieces = Tokenizer.from_str(tokenizer_json)
            self._pieces.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
            self._hf_pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            self._pattern, _ = _python_pretoken_pattern()
        self._verified: set[str] = set()
        self._disagreeing: set[str] = set()
        # regexes over the checked characters: one C-level scan tells whether a text holds a new one
        self._unchecked_char = re.compile(r"[\s\S]")
        self._disagreeing_char: re.Pattern | None = None
        self._pool = _PretokenPool()
        self._max_cached = max_cached_pretokens

    def _agrees_with_hf(self, c: str) -> bool:
        try:
            for probe in _PROBES:
                text = probe.format(c, c)
                ours = [m.span() for m in self._pattern.finditer(text)]
                if ours != [span for _, span in self._hf_pre.pre_tokenize_str(text)]:
                    return False
        except Exception:  # noqa: BLE001 - a character HF cannot take (e.g. a lone surrogate)
            return False
        return True

    def _check_new_characters(self, text: str) -> None:
        """Check each character of `text` not met before against HF's pre-tokenizer, once."""
        if self._unchecked_char.search(text) is None:
            return
        for c in set(text) - self._verified - self._disagreeing:
            (self._verified if self._agrees_with_hf(c) else self._disagreeing).add(c)
        self._unchecked_char = re.compile(f"[^{_class_body(_spans(self._verified | self._disagreeing))}]")
        if self._disagreeing:
            self._disagreeing_char = re.compile(f"[{_class_body(_spans(self._disagreeing))}]")

    def _fast_path_applies(self, text: str) -> bool:
        self._check_new_characters(text)
        if self._disagreeing_char is not None and self._disagreeing_char.search(text) is not None:
            return False
        return not any(a in text for a in self._added)

    def _fast_path_flags(self, texts: list[str]) -> list[bool]:
        # the whole batch at once: most batches hold no character HF splits differently
        if self._fast_path_applies("".join(texts)):
            return [True] * len(texts)
        return [self._fast_path_applies(t) for t in texts]

    def _encode_pieces_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids of every text concatenated, ids per text) for texts that take the fast path: split in
        Python, each pre-token's BPE looked up in the pool (HF asked only for new pre-tokens), and
        the ids gathered with numpy: no Python object per id."""
        split = list(map(self._pattern.findall, texts))
        if len(self._pool) > self._max_cached:
            self._pool = _PretokenPool()
        found, new = self._pool.indexes(chain.from_iterable(split))
        if new:
            self._pool.add(new, *self._encode_new_pieces(new))
        tokens, per_piece = self._pool.gather(found)
        piece_ends = np.cumsum(np.fromiter(map(len, split), np.int64, len(split)))
        token_ends = np.concatenate([[0], np.cumsum(per_piece)])[piece_ends]
        return tokens, np.diff(token_ends, prepend=0)

    def _encode_new_pieces(self, pieces: list[str], sequences: int = 8) -> tuple[np.ndarray, np.ndarray]:
        """(the BPE ids of each piece alone, concatenated; the number of ids of each piece): the pieces
        given to HF as a few pre-tokenized sequences, each piece one word (BPE never crosses a word;
        without the regex, the pre-tokenizer leaves each word whole), split back by the words' ids.
        One Encoding per sequence instead of one per piece."""
        size = -(-len(pieces) // sequences)
        parts = [pieces[k:k + size] for k in range(0, len(pieces), size)]
        encodings = self._pieces.encode_batch(parts, is_pretokenized=True, add_special_tokens=False)
        ids = np.concatenate([np.asarray(e.ids, np.uint32) for e in encodings])
        words = np.concatenate([np.asarray(e.word_ids, np.int64) + k * size for k, e in enumerate(encodings)])
        return ids, np.bincount(words, minlength=len(pieces)).astype(np.int64)

    def _encode_pieces(self, texts: list[str]) -> list[list[int]]:
        tokens, counts = self._encode_pieces_flat(texts)
        return [part.tolist() for part in np.split(tokens, np.cumsum(counts)[:-1])] if texts else []

    def _encode_short(self, texts: list[str]) -> list[list[int]]:
        if self._pieces is None:
            return [e.ids for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        out: list[list[int] | None] = [None] * len(texts)
        fast = self._fast_path_flags(texts)
        slow = [i for i, f in enumerate(fast) if not f]
        if slow:
            for i, e in zip(slow, self.tokenizer.encode_batch_fast([texts[i] for i in slow], add_special_tokens=False)):
                out[i] = e.ids
        quick = [i for i, f in enumerate(fast) if f]
        for i, ids in zip(quick, self._encode_pieces([texts[i] for i in quick])):
            out[i] = ids
        return out  # type: ignore[return-value]

    def _encode_long(self, text: str) -> np.ndarray:
        parts = [np.asarray(self._encode_short([text[a:b]])[0], np.uint32)
                 for a, b in _windows(text, self.long_text_chars)]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint32)

    def encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of every text concatenated, as uint32; the number of ids of each text, int64):
        the ids `encode_batch` gives, without a Python list per text."""
        if (self._pieces is not None and not any(len(t) > self.long_text_chars for t in texts)
                and all(self._fast_path_flags(texts))):
            return self._encode_pieces_flat(texts)
        parts = [np.asarray(ids, np.uint32) for ids in self.encode_batch(texts)]
        counts = np.fromiter(map(len, parts), np.int64, len(parts))
        return (np.concatenate(parts) if parts else np.zeros(0, np.uint32)), counts

    def encode_batch(self, texts: list[str]) -> list[list[int] | np.ndarray]:
        long = [i for i, t in enumerate(texts) if len(t) > self.long_text_chars] if self._can_split else []
        if not long:
            return self._encode_short(texts)  # type: ignore[return-value]
        long_set = set(long)
        short = [i for i in range(len(texts)) if i not in long_set]
        out: list = [None] * len(texts)
        for i, ids in zip(short, self._encode_short([texts[i] for i in short])):
            out[i] = ids
        for i in long:
            out[i] = self._encode_long(texts[i])
        return out


class _PretokenPool:
    """The BPE ids of the pre-tokens met so far, stored flat: pre-token i's ids are
    `tokens[starts[i]:starts[i] + lengths[i]]`; `index` maps a pre-token to i (gathered into a C
    array of unsigned ints as it is read: no Python object per piece is kept), and gives a piece not
    met before the next free i as it is looked up: one dict lookup per piece, in C."""

    def __init__(self) -> None:
        self.index: dict[str, int] = collections.defaultdict(itertools.count().__next__)
        self.tokens = np.zeros(1 << 16, np.uint32)
        self.starts = np.zeros(1 << 12, np.int64)
        self.lengths = np.zeros(1 << 12, np.int64)
        self.used = 0
        self.known = 0
        """Pre-tokens whose ids are stored (the first `known` of `index`)."""

    def __len__(self) -> int:
        return len(self.index)

    def indexes(self, pieces: Iterable[str]) -> tuple[np.ndarray, list[str]]:
        """(each piece's index; the pieces met for the first time, in index order), the latter to be
        given their ids with `add` before `gather`."""
        found = np.frombuffer(array.array("I", map(self.index.__getitem__, pieces)), np.uintc)
        fresh = len(self.index) - self.known
        return found, list(itertools.islice(reversed(self.index), fresh))[::-1] if fresh else []

    def add(self, pieces: list[str], flat: np.ndarray, lengths: np.ndarray) -> None:
        """Store the ids of the pieces `indexes` met for the first time (concatenated, and how many
        each piece has)."""
        first, count = self.known, len(pieces)
        self.tokens = _grown(self.tokens, self.used + len(flat))
        self.starts, self.lengths = _grown(self.starts, first + count), _grown(self.lengths, first + count)
        self.tokens[self.used:self.used + len(flat)] = flat
        self.starts[first:first + count] = self.used + np.cumsum(lengths) - lengths
        self.lengths[first:first + count] = lengths
        self.used += len(flat)
        self.known += count

    def gather(self, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of the pre-tokens `found`, concatenated; the number of ids of each)."""
        lengths, starts = self.lengths[found], self.starts[found]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        shift = np.repeat(starts - (ends - lengths), lengths)
        return self.tokens[np.arange(total, dtype=np.int64) + shift], lengths


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array`, or a copy at least twice as long when it is shorter than `size`."""
    if size <= len(array):
        return array
    bigger = np.zeros(max(size, 2 * len(array)), array.dtype)
    bigger[:len(array)] = array
    return bigger
