"""Steps for the tags, lineage and taint tests: raw -> tokenized -> train, and a reader of a tag.

Each step writes a small file and counts its calls in `calls.txt` beside the prefix (so a test can
see which steps really ran); step functions are module-level so records can name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, output_of_tag, output_path_of, this_output_path


@dataclass(frozen=True)
class RawConfig:
    text: str
    output_path: str


@dataclass(frozen=True)
class ReadConfig:
    input_path: str
    output_path: str
    suffix: str = ""


def make_raw(config: RawConfig) -> None:
    _count(config.output_path, "raw")
    Path(config.output_path, "data.txt").write_text(config.text)


def upper(config: ReadConfig) -> None:
    _count(config.output_path, "upper")
    text = Path(config.input_path).read_text()
    Path(config.output_path, "data.txt").write_text(text.upper() + config.suffix)


def _count(output_path: str, what: str) -> None:
    calls = Path(output_path).parents[2] / "calls.txt"  # beside the prefix (outputs are <prefix>/names/<id>)
    with open(calls, "a") as f:
        f.write(what + "\n")


def pipeline(text: str = "hello world") -> tuple[ExecutorStep, ExecutorStep, ExecutorStep]:
    raw = ExecutorStep(name="names/raw", fn=make_raw, config=RawConfig(text, this_output_path()))
    tok = ExecutorStep(name="names/tok", fn=upper,
                       config=ReadConfig(output_path_of(raw, "data.txt"), this_output_path()))
    train = ExecutorStep(name="names/train", fn=upper,
                         config=ReadConfig(output_path_of(tok, "data.txt"), this_output_path(), "!"))
    return raw, tok, train


def reader_of(tag: str) -> ExecutorStep:
    return ExecutorStep(name="names/reader", fn=upper,
                        config=ReadConfig(output_of_tag(tag, "data.txt"), this_output_path(), "?"))
