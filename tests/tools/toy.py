"""The toy experiment the tool tests edit and run, and in-process runners for files and `-m executor`.

The toy experiment is written into each test's tmp_path so tests can edit it (a hashed field, an
execution-only field, a step function's source) and run it again. Running it with runpy as
__main__ is what `python toy.py` does, minus the interpreter start-up.
"""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
from pathlib import Path

TOY = '''\
"""A toy experiment for the tool tests: raw -> tokenize -> train -> report."""
import json
from dataclasses import dataclass, field
from pathlib import Path

from executor import ExecutorStep, execution_only, executor_main, output_path_of, this_output_path


@dataclass(frozen=True)
class RawConfig:
    text: str
    output_path: str


def make_raw(config: RawConfig) -> dict:
    Path(config.output_path, "raw.txt").write_text(config.text)
    Path(config.output_path, "shard-0.txt").write_text(config.text.upper())
    return {"chars": len(config.text)}


@dataclass(frozen=True)
class TokenizerSpec:
    vocab_size: int
    lowercase: bool = True


@dataclass(frozen=True)
class TokenizeConfig:
    input_path: str
    tokenizer: TokenizerSpec
    output_path: str
    workers: int = execution_only(2)


def tokenize(config: TokenizeConfig) -> dict:
    words = Path(config.input_path).read_text().split()
    # deterministic ids that differ with the vocab size (byte-identical outputs would be cut off: issue 44)
    ids = [sum(map(ord, w)) * 31 % config.tokenizer.vocab_size for w in words]
    Path(config.output_path, "tokens.json").write_text(json.dumps(ids))
    return {"tokens": len(words)}


@dataclass(frozen=True)
class TrainConfig:
    tokens_path: str
    learning_rate: float
    output_path: str


def train(config: TrainConfig) -> dict:
    tokens = json.loads(Path(config.tokens_path).read_text())
    model = {"lr": config.learning_rate, "n": len(tokens), "sum": sum(tokens)}
    Path(config.output_path, "model.json").write_text(json.dumps(model))
    return {"steps": len(tokens)}


@dataclass(frozen=True)
class ReportConfig:
    model_path: str
    output_path: str


def report(config: ReportConfig) -> dict:
    model = json.loads(Path(config.model_path).read_text())
    Path(config.output_path, "report.txt").write_text(f"model trained on {model['n']} tokens\\n")
    return model


raw = ExecutorStep("toy/raw", make_raw, RawConfig(TEXT, this_output_path()))
tok = ExecutorStep("toy/tokenize", tokenize,
                   TokenizeConfig(output_path_of(raw, "raw.txt"), TokenizerSpec(VOCAB), this_output_path(), workers=WORKERS))
trained = ExecutorStep("toy/train", train, TrainConfig(output_path_of(tok, "tokens.json"), LR, this_output_path()))
summary = ExecutorStep("toy/report", report, ReportConfig(output_path_of(trained, "model.json"), this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[summary], description="toy")
'''

DEFAULTS = {"TEXT": repr("to be or not to be"), "VOCAB": "4096", "WORKERS": "2", "LR": "0.001"}


class Toy:
    """The toy experiment file in a temporary directory, with a prefix of its own."""

    def __init__(self, directory: Path):
        self.path = directory / "toy.py"
        self.prefix = str(directory / "prefix")
        self.values = dict(DEFAULTS)
        self.write()

    def write(self, **values: str) -> "Toy":
        self.values.update(values)
        text = TOY
        for key, value in self.values.items():
            text = text.replace(key, value) if key != "TEXT" else text.replace("(TEXT,", f"({value},")
        self.path.write_text(text)
        return self

    def edit_source(self, old: str, new: str) -> None:
        text = self.path.read_text()
        assert old in text
        self.path.write_text(text.replace(old, new))

    def run(self, *argv: str, prefix: bool = True, split: bool = False) -> tuple:
        args = [*argv, *(["--prefix", self.prefix] if prefix else [])]
        return run_file(self.path, *args, split=split)


def run_file(path: Path, *argv: str, split: bool = False) -> tuple:
    """`python path argv...` in this process: (exit code, stdout + stderr), or with split=True
    (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved = list(sys.argv)
    sys.argv = [str(path), *argv]
    code = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err if split else out):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = saved
    assert code is not None, "the experiment did not exit through executor_main"
    return (int(code), out.getvalue(), err.getvalue()) if split else (int(code), out.getvalue())


def run_main(*argv: str) -> tuple[int, str]:
    """`python -m executor argv...` in this process: (exit code, stdout + stderr)."""
    from executor.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()
