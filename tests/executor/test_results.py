"""Structured results: a returned dataclass is stored as JSON data and loaded back (issue 18)."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import executor
from executor import ExecutorError, ExecutorStep, Options, this_output_path


class Split(enum.Enum):
    TRAIN = "train"
    VALIDATION = "validation"


@dataclass(frozen=True)
class ShardInfo:
    path: Path
    tokens: int


@dataclass(frozen=True)
class TokenizeMetadata:
    path: str
    num_tokens: int
    split: Split
    shards: tuple[ShardInfo, ...] = ()
    vocab: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MakeConfig:
    tokens: int
    output_path: str


def make_metadata(config: MakeConfig) -> TokenizeMetadata:
    return TokenizeMetadata(config.output_path, config.tokens, Split.TRAIN,
                            (ShardInfo(Path(config.output_path, "a.bin"), config.tokens),), {"<s>": 0})


def make_unannotated(config: MakeConfig):
    return make_metadata(config)


class Opaque:
    def __repr__(self) -> str:
        return "Opaque(42)"


def make_opaque(config: MakeConfig) -> object:
    return Opaque()


def record_of(path: str) -> dict:
    return json.loads(Path(path, ".executor", "record.json").read_text())


def test_a_returned_dataclass_is_stored_as_fields_and_loaded_back(tmp_path):
    options = Options(prefix=str(tmp_path), runner="inline")
    step = ExecutorStep("tok/meta", make_metadata, MakeConfig(42, this_output_path()))
    with pytest.raises(ExecutorError, match=r"'tok/meta' has not succeeded .* \(no status\)"):
        executor.load_result(step, options)
    path = executor.materialize(step, options)
    record = record_of(path)
    assert record["result"] == {"path": path, "num_tokens": 42, "split": "TRAIN",
                                "shards": [{"path": f"{path}/a.bin", "tokens": 42}], "vocab": {"<s>": 0}}
    assert record["result_type"] == "tests.executor.test_results:TokenizeMetadata"
    loaded = executor.load_result(step, options)  # the function's return annotation says the type
    assert loaded == make_metadata(MakeConfig(42, path))
    assert isinstance(loaded.shards[0].path, Path) and loaded.split is Split.TRAIN


def test_without_an_annotation_the_fields_or_as_type(tmp_path):
    options = Options(prefix=str(tmp_path), runner="inline")
    step = ExecutorStep("tok/plain", make_unannotated, MakeConfig(7, this_output_path()))
    path = executor.materialize(step, options)
    assert executor.load_result(step, options)["num_tokens"] == 7
    assert executor.load_result(step, options, as_type=TokenizeMetadata) == make_metadata(MakeConfig(7, path))
    with pytest.raises(ExecutorError, match="does not fit ShardInfo"):
        executor.load_result(step, options, as_type=ShardInfo)


def test_anything_else_is_still_stored_as_text(tmp_path):
    options = Options(prefix=str(tmp_path), runner="inline")
    path = executor.materialize(ExecutorStep("tok/opaque", make_opaque, MakeConfig(1, this_output_path())), options)
    assert record_of(path)["result"] == "Opaque(42)" and record_of(path)["result_type"] is None
