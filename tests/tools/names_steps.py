"""Steps for the tags, lineage and taint tests: raw -> tokenized -> train, and a reader of a tag.

Each step writes a small file and counts its calls in `calls.txt` beside the prefix (so a test can
see which steps really ran); step functions are module-level so records can name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from executor import ExecutorStep, open_file, output_of_tag, output_path_of, this_output_path


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
    with open_file(f"{config.output_path}/data.txt", "w") as f:  # a local path or a bucket's URL
        f.write(config.text)


def upper(config: ReadConfig) -> None:
    _count(config.output_path, "upper")
    with open_file(config.input_path, "r") as f:
        text = f.read()
    with open_file(f"{config.output_path}/data.txt", "w") as f:
        f.write(text.upper() + config.suffix)


def _count(output_path: str, what: str) -> None:
    if "://" in output_path:  # on a bucket: not counted
        return
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
