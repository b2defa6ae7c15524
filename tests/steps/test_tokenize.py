"""Tokenize: exact round trip, shard-count invariance, a SIGKILLed run resumes, tokenizer reuse."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, pre_tokenizers

from steps.documents import BadInputError
from steps.token_cache import TokenSplit, read_ledger
from steps.tokenize import TokenizeConfig, is_validation, tokenize

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus_dir(small_corpus, tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("tok-corpus") / "in")
    small_corpus.write(directory, num_shards=3)
    return directory


@pytest.fixture(scope="module")
def one_shard(corpus_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tok") / "one")
    result = tokenize(TokenizeConfig(corpus_dir, out, vocab_size=600, num_output_shards=1, validation_fraction=0.1))
    return out, result


def stream(path: str, split: str) -> np.ndarray:
    s = TokenSplit.open(path, split)
    return s.window(0, s.num_tokens) if s.num_tokens else np.zeros(0, np.int64)


def test_round_trip_and_ledger(small_corpus, one_shard):
    out, result = one_shard
    tokenizer = Tokenizer.from_file(f"{out}/tokenizer.json")
    ledger = read_ledger(out)
    assert set(ledger["splits"]) == {"train", "validation"}
    eos = ledger["eos_id"]
    for split in ("train", "validation"):
        expected = [d for d in small_corpus.docs if is_validation(d["id"], 0.1, 0) == (split == "validation")]
        docs = list(TokenSplit.open(out, split).documents())
        assert len(docs) == len(expected) > 0
        for (ids, n_bytes), doc in zip(docs, expected):
            assert ids[-1] == eos and eos not in ids[:-1]
            assert tokenizer.decode(ids[:-1].tolist()) == doc["text"]
            assert n_bytes == len(doc["text"].encode("utf-8"))
    assert result["train_documents"] + result["validation_documents"] == len(small_corpus.docs)
    assert result["train_tokens"] == TokenSplit.open(out, "train").num_tokens
    json.dumps(result)


def test_stream_is_independent_of_output_shard_count(corpus_dir, one_shard, tmp_path):
    out1, _ = one_shard
    out5 = str(tmp_path / "five")
    result = tokenize(TokenizeConfig(corpus_dir, out5, vocab_size=600, num_output_shards=5, validation_fraction=0.1))
    assert result["shards"] == 5
    assert Path(f"{out1}/tokenizer.json").read_text() == Path(f"{out5}/tokenizer.json").read_text()
    for split in ("train", "validation"):
        assert np.array_equal(stream(out1, split), stream(out5, split))
    assert len(read_ledger(out5)["splits"]["train"]["shards"]) == 5


def test_existing_tokenizer_is_reused(corpus_dir, one_shard, tmp_path):
    out1, _ = one_shard
    out = str(tmp_path / "reuse")
    tokenize(TokenizeConfig(corpus_dir, out, vocab_size=12345, tokenizer_path=f"{out1}/tokenizer.json",
                            num_output_shards=2, validation_fraction=0.1))
    assert read_ledger(out)["tokenizer_sha256"] == read_ledger(out1)["tokenizer_sha256"]
    assert np.array_equal(stream(out, "train"), stream(out1, "train"))


KILLABLE_RUN = textwrap.dedent("""
    import sys, time
    import steps.tokenize as t
    original = t._assemble_shard  # num_output_shards > 0: output shards are cut from by-file/ results
    def slow(job):  # commit a shard, then pause so the test can kill us between shards
        result = original(job)
        time.sleep(0.4)
        return result
    t._assemble_shard = slow
    t.tokenize(t.TokenizeConfig(sys.argv[1], sys.argv[2], tokenizer_path=sys.argv[3],
                                num_output_shards=8, validation_fraction=0.1))
""")


def test_killed_run_resumes_without_redoing_committed_shards(corpus_dir, one_shard, tmp_path):
    out1, _ = one_shard
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", KILLABLE_RUN, corpus_dir, str(out), f"{out1}/tokenizer.json"],
                               cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(list((out / "shards").glob("*.json"))) < 2:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the tokenize subprocess committed no shards in 60 s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    committed = sorted(p.name for p in (out / "shards").glob("*.json"))
    assert 2 <= len(committed) < 8 and not (out / "ledger.json").exists()
    stamps = {p: p.stat().st_mtime_ns for p in (out / "train").glob("*.npy")}
    (out / "train" / "00007-of-00008.tokens.npy.tmp-left-by-the-kill").write_bytes(b"torn")

    result = tokenize(TokenizeConfig(corpus_dir, str(out), tokenizer_path=f"{out1}/tokenizer.json",
                                     num_output_shards=8, validation_fraction=0.1))
    assert result["shards_resumed"] == len(committed)
    assert (result["shards_processed"], result["shards_reused"]) == (0, 0)  # every input file's result resumed
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]  # the dead attempt's temporaries are gone
    for path, stamp in stamps.items():
        if any(path.name.startswith(c.removesuffix(".json")) for c in committed):
            assert path.stat().st_mtime_ns == stamp, f"{path.name} was rewritten"
    for split in ("train", "validation"):
        assert np.array_equal(stream(str(out), split), stream(out1, split))


def test_empty_input_and_bad_config_are_clear_errors(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("\n\n")
    with pytest.raises(BadInputError, match="no documents"):
        tokenize(TokenizeConfig(str(tmp_path / "in"), str(tmp_path / "out"), vocab_size=300))
    with pytest.raises(ValueError, match="validation_fraction"):
        TokenizeConfig("in", "out", validation_fraction=1.5)
    with pytest.raises(FileNotFoundError, match="tokenizer_path"):
        (tmp_path / "in" / "a.jsonl").write_text('{"id": "1", "text": "x"}\n')
        tokenize(TokenizeConfig(str(tmp_path / "in"), str(tmp_path / "out2"), tokenizer_path=str(tmp_path / "no.json")))
    from steps.bpe import train_byte_level_bpe

    with pytest.raises(ValueError, match="vocab_size=256: a byte-level BPE needs at least 257 ids"):
        train_byte_level_bpe(["x"], 256, min_frequency=2)
    assert train_byte_level_bpe(["ab ab ab"], 257, min_frequency=2).get_vocab_size() == 257  # the least allowed


TRICKY = ["", " ", "a", "  a", "a  ", "it's we'll they'd I'M 'S", "x  \t\n\n  y\r\n", "1234abc  99 zz",
          "!!! ?? ...hello---world", "tabs\tand\nnewlines\n\n\n", "don't'll've", "  'twas  ", "_under_score__",
          "snake_case + 2*x == y; // c", "ends with spaces   ", "\n", "\t\t", "a\x0bb\x0cc",  # VT/FF: spaces to both engines
          "café", "日本語 text", "<|endoftext|> inside", "emoji 🎭!"]


def test_batch_encoder_gives_the_tokenizers_ids(one_shard, small_corpus):
    from steps.bpe import BatchEncoder

    out, _ = one_shard
    text = Path(f"{out}/tokenizer.json").read_text()
    reference = Tokenizer.from_str(text)
    rng = np.random.default_rng(0)
    alphabet = list("ab Z9'_-.!\t\n\r ") + ["'s", "'ll", "  ", "\n\n"]
    randoms = ["".join(rng.choice(alphabet, size=rng.integers(0, 40))) for _ in range(500)]
    texts = TRICKY + randoms + [d["text"] for d in small_corpus.docs]
    encoder = BatchEncoder(text)
    expected = [e.ids for e in reference.encode_batch_fast(texts, add_special_tokens=False)]
    assert encoder.encode_batch(texts) == expected
    assert encoder.encode_batch(texts) == expected  # warm cache too
    assert encoder._pieces is not None  # the fast path was in use


def test_flat_batches_give_the_tokenizers_ids_across_pool_resets(one_shard, small_corpus):
    """`encode_batch_flat` (what the step uses) returns every text's ids concatenated, with a count
    per text: the same ids as HF, batch after batch, while its pool of pre-tokens grows past its first
    arrays and is dropped once it holds more than `max_cached_pretokens`; HF-path texts included."""
    from steps.bpe import BatchEncoder

    out, _ = one_shard
    text = Path(f"{out}/tokenizer.json").read_text()
    reference = Tokenizer.from_str(text)
    texts = TRICKY + _sample_of_unicode(np.random.default_rng(3), 400) + [d["text"] for d in small_corpus.docs]
    encoder = BatchEncoder(text, max_cached_pretokens=500)
    for start in range(0, len(texts), 97):
        batch = texts[start:start + 97]
        tokens, counts = encoder.encode_batch_flat(batch)
        expected = [e.ids for e in reference.encode_batch_fast(batch, add_special_tokens=False)]
        assert tokens.dtype == np.uint32 and counts.tolist() == [len(ids) for ids in expected]
        assert tokens.tolist() == [i for ids in expected for i in ids]
    assert encoder.encode_batch_flat([])[1].tolist() == []
    assert len(encoder._pool) <= 500 + 97 * 200  # dropped once over the limit, not grown forever


def test_fast_and_reference_encoding_give_the_same_cache(corpus_dir, one_shard, tmp_path):
    out1, _ = one_shard
    out = str(tmp_path / "reference")
    tokenize(TokenizeConfig(corpus_dir, out, tokenizer_path=f"{out1}/tokenizer.json", num_output_shards=1,
                            validation_fraction=0.1, fast_ascii_encoding=False))
    for split in ("train", "validation"):
        assert np.array_equal(stream(out, split), stream(out1, split))


def _sample_of_unicode(rng: np.random.Generator, count: int) -> list[str]:
    """Texts drawn from every plane of Unicode (letters, numbers, marks, spaces, controls, symbols,
    emoji, unassigned code points), mixed with ASCII words and spaces."""
    planes = np.concatenate([rng.integers(0, 0x3000, 3000), rng.integers(0x3000, 0x10000, 2000),
                             rng.integers(0x10000, 0x110000, 1000)])
    pool = [chr(c) for c in planes if not 0xD800 <= c <= 0xDFFF] + list(" \t\n\x0b\x0c\x1c\x85\u00a0\u2028\u3000")
    pool += ["word", " the", "'s", "café", "日本", "🎭", "👍🏽", "1234"]
    return ["".join(rng.choice(pool, size=rng.integers(0, 60))) for _ in range(count)]


def test_batch_encoder_matches_hf_on_all_of_unicode_and_takes_the_fast_path(one_shard):
    from steps.bpe import BatchEncoder

    out, _ = one_shard
    text = Path(f"{out}/tokenizer.json").read_text()
    reference = Tokenizer.from_str(text)
    texts = _sample_of_unicode(np.random.default_rng(1), 1500)
    encoder = BatchEncoder(text)
    assert encoder.encode_batch(texts) == [e.ids for e in reference.encode_batch_fast(texts, add_special_tokens=False)]
    # sharper than ids (a vocabulary may lack the merges that would show a different split):
    # every text given the fast path is split exactly where HF's pre-tokenizer splits it
    hf_split = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str
    fast = [t for t in texts + ["x \x1cy", "a\u0085 b"] if encoder._fast_path_applies(t)]
    assert len(fast) > len(texts) // 2
    assert [[m.span() for m in encoder._pattern.finditer(t)] for t in fast] == \
        [[span for _, span in hf_split(t)] for t in fast]
    accented = ["Crème brûlée à São Paulo — 東京 © 2024 😀", "naïve façade «déjà vu» ½ µm"]
    assert all(encoder._fast_path_applies(t) for t in accented)  # non-ASCII text is not sent to HF whole


def test_a_huge_document_is_encoded_piece_by_piece_with_the_same_ids(one_shard, small_corpus):
    from steps.bpe import BatchEncoder, _windows

    out, _ = one_shard
    text = Path(f"{out}/tokenizer.json").read_text()
    huge = "\n".join(d["text"] for d in small_corpus.docs) * 3    # ~100 k characters, one document
    encoder = BatchEncoder(text, long_text_chars=4096)
    pieces = _windows(huge, 4096)
    assert len(pieces) > 20 and max(b - a for a, b in pieces) <= 4096  # memory bounded by the piece size
    ids = encoder.encode_batch(["short one", huge])
    assert isinstance(ids[1], np.ndarray)
    assert ids[1].tolist() == Tokenizer.from_str(text).encode(huge, add_special_tokens=False).ids


def test_characters_met_batch_after_batch_are_each_checked(one_shard):
    """The tokenize step encodes batch after batch with one encoder per worker: a character first
    met in a later batch is checked then, whatever was checked before (here: tab, newline and two
    neighbouring letters, then the separators U+001C-U+001F, which Python counts as spaces and HF
    does not: texts holding them must not take the fast path)."""
    from steps.bpe import BatchEncoder

    out, _ = one_shard
    text = Path(f"{out}/tokenizer.json").read_text()
    reference = Tokenizer.from_str(text)
    hf_split = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str
    encoder = BatchEncoder(text)
    separated = ["x \x1cy", "a\x1db", "\x1e\x1f z"]
    texts = ["\t\nab yz"] + separated + _sample_of_unicode(np.random.default_rng(2), 300)
    for t in texts:  # one text per batch
        assert encoder.encode_batch([t])[0] == reference.encode(t, add_special_tokens=False).ids, repr(t)
    assert not any(encoder._fast_path_applies(t) for t in separated)
    fast = [t for t in texts if encoder._fast_path_applies(t)]
    assert [[m.span() for m in encoder._pattern.finditer(t)] for t in fast] == \
        [[span for _, span in hf_split(t)] for t in fast]


def test_documents_are_encoded_in_batches_of_batch_docs(corpus_dir, one_shard, tmp_path, monkeypatch):
    from steps import tokenize as tokenize_module

    out1, _ = one_shard
    batches: list[int] = []
    encoder = tokenize_module._process_encoder(Path(f"{out1}/tokenizer.json").read_text())
    encode = encoder.encode_batch_flat
    monkeypatch.setattr(encoder, "encode_batch_flat", lambda texts: batches.append(len(texts)) or encode(texts))
    out = str(tmp_path / "batched")
    result = tokenize(TokenizeConfig(corpus_dir, out, tokenizer_path=f"{out1}/tokenizer.json", num_output_shards=1,
                                     validation_fraction=0.1, batch_docs=7))
    assert sum(batches) == result["documents"] and len(batches) > 3
    assert set(batches[:-1]) == {7} and 1 <= batches[-1] <= 7, batches
    for split in ("train", "validation"):
        assert np.array_equal(stream(out, split), stream(out1, split))


def test_training_a_tokenizer_prints_nothing(capfd):
    from steps.bpe import train_byte_level_bpe

    train_byte_level_bpe(["hello world, hello tokenizer"] * 200, 300, min_frequency=2)
    assert capfd.readouterr() == ("", "")  # the step shows its own progress; HF's bar would garble logs


def test_a_tokenizer_that_adds_special_tokens_is_encoded_without_them(one_shard):
    """Documents are encoded without the tokenizer's post-processor (EOS is added by the step), on
    the fast path and on HF's path alike."""
    from steps.bpe import BatchEncoder

    out, _ = one_shard
    spec = json.loads(Path(f"{out}/tokenizer.json").read_text())
    spec["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                                                        {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0],
                                                                   "tokens": ["<|endoftext|>"]}}}
    text = json.dumps(spec)
    reference = Tokenizer.from_str(text)
    texts = ["plain words here", "x \x1cy takes HF's path"]
    assert reference.encode(texts[0]).ids[0] == 0  # the post-processor is live
    assert BatchEncoder(text).encode_batch(texts) == [reference.encode(t, add_special_tokens=False).ids for t in texts]


def test_training_texts_are_read_with_the_steps_storage_options():
    """tokenizers pulls the training texts from a thread of its own: each text is still produced
    with the step's storage options (on a bucket prefix, the dedup output is read with them)."""
    import threading

    from executor.core.locations import Storage
    from executor.engine.prefix.location import current_storage, using
    from steps.bpe import train_byte_level_bpe

    seen = []

    def texts():
        for i in range(2000):
            seen.append((threading.get_ident(), current_storage()))
            yield f"hello world {i} some words to merge"

    storage = Storage({"s3://corpus": {"key": "k"}})
    with using(storage):
        train_byte_level_bpe(texts(), 300, min_frequency=2)
    assert len(seen) == 2000 and all(s == storage for _, s in seen)
    assert any(t != threading.get_ident() for t, _ in seen), "tokenizers pulled on another thread (the case held)"


def test_the_tokenizer_is_trained_on_the_training_documents_only(corpus_dir, small_corpus, tmp_path, monkeypatch):
    """No leak into evaluation (README): the BPE learns from the train split's documents, every one
    of them and nothing of the validation documents, which are scored against it later."""
    import steps.tokenize as step_module

    trained_on: list[str] = []
    real_training = step_module.train_byte_level_bpe

    def recording(texts, *args, **kwargs):
        def kept():
            for text in texts:
                trained_on.append(text)
                yield text
        return real_training(kept(), *args, **kwargs)

    monkeypatch.setattr(step_module, "train_byte_level_bpe", recording)
    tokenize(TokenizeConfig(corpus_dir, str(tmp_path / "out"), vocab_size=600, num_output_shards=1,
                            validation_fraction=0.1))
    train = [d["text"] for d in small_corpus.docs if not is_validation(d["id"], 0.1, 0)]
    validation = [d["text"] for d in small_corpus.docs if is_validation(d["id"], 0.1, 0)]
    assert validation and sorted(trained_on) == sorted(train)
