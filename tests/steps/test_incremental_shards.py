"""Incremental data steps (steps/shard_reuse.py): a 16-shard corpus run, then one shard added, one
changed and one removed; the new run under a new id processes only the added and changed shards,
and its output is byte-identical to a fresh full run in another prefix. A reused result whose bytes
differ from their recorded sha256 is recomputed, never copied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor import ExecutorStep, this_output_path
from executor.api import run
from steps.bpe import train_byte_level_bpe
from steps.dedup.exact import ExactDedupConfig, exact_dedup
from steps.documents import write_documents
from steps.shard_reuse import INDEX_DIR
from steps.tokenize import TokenizeConfig, tokenize

SHARDS = 16
_WORDS = ["café", "naïve", "Ünïcödé", "straße", "über", "€20", "©", "→", "日本語のテキスト", "这是中文",
          "한국어", "data", "shard", "token", "the", "corpus", "grows", "by", "one", "dump"]


def _doc(shard: int, k: int, salt: str = "") -> dict:
    words = [_WORDS[(shard * 7 + k * 3 + i * i) % len(_WORDS)] for i in range(12 + k % 9)]
    return {"id": f"s{shard}-d{k}{salt}", "text": " ".join(words) + salt}


def _shard_docs(shard: int, salt: str = "") -> list[dict]:
    docs = [_doc(shard, k, salt) for k in range(20)]
    docs.append({"id": f"s{shard}-copy", "text": "the same boilerplate in every shard © 2026 — 日本"})
    docs.append({"id": f"s{shard}-copy-of-{(shard + 1) % SHARDS}", "text": _doc((shard + 1) % SHARDS, 3)["text"]})
    return docs


def write_corpus(directory: Path, shards: dict[str, list[dict]]) -> str:
    for name, docs in shards.items():
        write_documents(str(directory / f"{name}.jsonl.zst"), docs)
    return str(directory)


def first_and_grown(make, count: int, removed: int, changed: list[dict]) -> tuple[dict, dict]:
    """The incremental tests' two corpora: `first` has shards 0..count-1 (`make(i)`); `grown` lacks shard
    `removed`, holds `changed` as shard 03 and adds shard `count`."""
    first = {f"part-{i:05d}": make(i) for i in range(count)}
    grown = {n: d for n, d in first.items() if n != f"part-{removed:05d}"}
    grown["part-00003"] = changed
    grown[f"part-{count:05d}"] = make(count)
    return first, grown


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, str]:
    """`first`: 16 shards; `grown`: shard 03 changed, 07 removed, a new shard 16 added."""
    root = tmp_path_factory.mktemp("corpora")
    first, grown = first_and_grown(_shard_docs, SHARDS, 7, _shard_docs(3, salt=" (fixed)"))
    tokenizer = train_byte_level_bpe([d["text"] for docs in first.values() for d in docs], 400, "<|endoftext|>",
                                     min_frequency=2)
    (root / "tokenizer.json").write_text(tokenizer.to_str())
    return {"first": write_corpus(root / "first", first), "grown": write_corpus(root / "grown", grown),
            "tokenizer": str(root / "tokenizer.json")}


def tokenize_step(corpus: str, tokenizer: str, num_output_shards: int = 0, **extra) -> ExecutorStep:
    return ExecutorStep("tokenized", tokenize, TokenizeConfig(corpus, this_output_path(), tokenizer_path=tokenizer,
                                                              num_output_shards=num_output_shards,
                                                              validation_fraction=0.2, **extra))


def dedup_step(corpus: str) -> ExecutorStep:
    return ExecutorStep("deduped", exact_dedup, ExactDedupConfig(corpus, this_output_path()))


def run_step(step: ExecutorStep, prefix: Path) -> tuple[str, dict]:
    """(output path, the step's result as recorded) of an inline run."""
    result = run([step], prefix=str(prefix), runner="inline")
    result.raise_on_failure()
    out = result.step(step).output_path
    return out, json.loads((Path(out) / ".executor" / "record.json").read_text())["result"]


def files_of(output: str) -> dict[str, bytes]:
    """Every file of an output but the executor's own records."""
    root = Path(output)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".executor" not in p.relative_to(root).parts}


def assert_same_bytes(incremental: str, full: str) -> None:
    got, want = files_of(incremental), files_of(full)
    assert sorted(got) == sorted(want)
    assert [name for name in want if got[name] != want[name]] == []


@pytest.mark.parametrize("kind", ["tokenize", "exact_dedup"])
def test_a_grown_corpus_processes_only_its_new_and_changed_shards(kind, corpora, tmp_path):
    make = (lambda c: tokenize_step(c, corpora["tokenizer"])) if kind == "tokenize" else dedup_step
    first_out, first = run_step(make(corpora["first"]), tmp_path / "p")
    assert (first["shards_processed"], first["shards_reused"]) == (SHARDS, 0)
    incremental, grown = run_step(make(corpora["grown"]), tmp_path / "p")
    full, fresh = run_step(make(corpora["grown"]), tmp_path / "q")
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS, 0)
    assert_same_bytes(incremental, full)
    assert len(list((Path(full) / INDEX_DIR).iterdir())) >= SHARDS
    if kind == "exact_dedup":  # written again: the new and changed shards, and those whose removals changed
        before, after = files_of(first_out), files_of(full)
        changed = {n for n in after if n.startswith("attributes/") and before.get(n) != after[n]}
        assert grown["shards_rewritten"] == len(changed | {"attributes/part-00003.jsonl.zst"}) > 2
        # the 14 reused shards' stored records reached the shuffle together, in one task
        assert grown["nodes_per_stage"]["reused-records"] == 1 and "reused-records" not in fresh["nodes_per_stage"]


def test_a_fixed_number_of_output_shards_encodes_only_the_new_and_changed_files(corpora, tmp_path):
    """num_output_shards=5: the grown corpus moves every later shard boundary, yet only the added and
    changed input files are encoded (the rest reused from by-file/); the output is byte-identical to a
    fresh full run, and its shards hold the same bytes as encoding each record range directly."""
    make = lambda corpus, **extra: tokenize_step(corpus, corpora["tokenizer"], num_output_shards=5, **extra)  # noqa: E731
    first_out, first = run_step(make(corpora["first"]), tmp_path / "p")
    assert (first["shards_processed"], first["shards_reused"], first["shards"]) == (SHARDS, 0, 5)
    incremental, grown = run_step(make(corpora["grown"]), tmp_path / "p")
    full, fresh = run_step(make(corpora["grown"]), tmp_path / "q")
    assert (grown["shards_processed"], grown["shards_reused"], grown["shards"]) == (2, SHARDS - 2, 5)
    assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS, 0)
    assert_same_bytes(incremental, full)
    moved = [n for n in files_of(full) if n.startswith("train/") and files_of(first_out).get(n) != files_of(full)[n]]
    assert len(moved) >= 3  # the boundaries did move: most output shards differ from the first run's
    # the path that encodes each output shard's record range directly (no by-file results) writes the same shards
    direct, _ = run_step(make(corpora["grown"], on_bad_line="skip"), tmp_path / "r")
    shards = {n: b for n, b in files_of(direct).items() if n.split("/")[0] in ("train", "validation", "shards")}
    assert len(shards) == 5 * 7 and {n: files_of(full)[n] for n in shards} == shards
    assert files_of(full)["ledger.json"] == files_of(direct)["ledger.json"]


def test_reused_shards_records_are_grouped_by_partition_bytes():
    """Reused shards share a task, in order, while their records fit about `partition_bytes` (64
    bytes a record); a shard processed in this run is in no group."""
    from steps.dedup.exact import _Plan, _reused_groups

    hashed = [{"reused": k != 2, "stats": {"documents": 10}} for k in range(6)]
    plan = _Plan("work", [], 1, ExactDedupConfig("in", "out", partition_bytes=64 * 20))
    assert _reused_groups(plan, hashed) == [[0, 1], [3, 4], [5]]
    plan = _Plan("work", [], 1, ExactDedupConfig("in", "out", partition_bytes=64 << 20))
    assert _reused_groups(plan, hashed) == [[0, 1, 3, 4, 5]]
    plan = _Plan("work", [], 1, ExactDedupConfig("in", "out", partition_bytes=1))
    assert _reused_groups(plan, hashed) == [[0], [1], [3], [4], [5]]


def test_a_damaged_reused_result_is_recomputed(corpora, tmp_path):
    first_out, _ = run_step(tokenize_step(corpora["first"], corpora["tokenizer"]), tmp_path / "p")
    damaged = Path(first_out) / "train" / "part-00005.tokens.npy"
    damaged.write_bytes(damaged.read_bytes()[:-2] + b"\0\1")
    incremental, grown = run_step(tokenize_step(corpora["grown"], corpora["tokenizer"]), tmp_path / "p")
    full, _ = run_step(tokenize_step(corpora["grown"], corpora["tokenizer"]), tmp_path / "q")
    assert (grown["shards_processed"], grown["shards_reused"]) == (3, SHARDS - 3)
    assert_same_bytes(incremental, full)


def test_shard_tasks_on_ray_reuse_the_same_way(ray_local, corpora, tmp_path):
    """map_shards on Ray: each shard task looks up and copies its own result; outputs named as the
    executor names them (`<name>-<12 hex>`), the step called directly in a Ray-connected driver."""
    from executor.engine.runner.ray_env import ray_is_active

    assert ray_is_active()

    def config(corpus: str, out: Path) -> ExactDedupConfig:
        return ExactDedupConfig(corpus, str(out))

    exact_dedup(config(corpora["first"], tmp_path / "p" / "deduped-000000000001"))
    grown = exact_dedup(config(corpora["grown"], tmp_path / "p" / "deduped-000000000002"))
    fresh = exact_dedup(config(corpora["grown"], tmp_path / "q" / "deduped-000000000002"))
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    assert (fresh["shards_processed"], fresh["shards_reused"]) == (SHARDS, 0)
    assert_same_bytes(str(tmp_path / "p" / "deduped-000000000002"), str(tmp_path / "q" / "deduped-000000000002"))


@pytest.mark.parametrize("num_output_shards", [0, 5])
def test_a_grown_corpus_on_the_ray_runner_processes_only_its_new_and_changed_shards(num_output_shards, ray_local,
                                                                                     corpora, tmp_path):
    """The executor's Ray runner (the module's cluster, joined): each shard task claims, reuses or
    makes its own result in a Ray worker; the output is byte-identical to a fresh full run. With
    num_output_shards=5 the shards are the input files' by-file results, then 5 assembled shards."""

    def on_ray(step: ExecutorStep, prefix: Path) -> tuple[str, dict]:
        result = run([step], prefix=str(prefix), runner="ray")
        result.raise_on_failure()
        out = result.step(step).output_path
        return out, json.loads((Path(out) / ".executor" / "record.json").read_text())["result"]

    on_ray(tokenize_step(corpora["first"], corpora["tokenizer"], num_output_shards), tmp_path / "p")
    incremental, grown = on_ray(tokenize_step(corpora["grown"], corpora["tokenizer"], num_output_shards), tmp_path / "p")
    full, _ = run_step(tokenize_step(corpora["grown"], corpora["tokenizer"], num_output_shards), tmp_path / "q")
    assert (grown["shards_processed"], grown["shards_reused"]) == (2, SHARDS - 2)
    assert_same_bytes(incremental, full)
    assert len(list((tmp_path / "p" / ".shard-claims" / "tokenized").glob("*.json"))) == SHARDS + 2
