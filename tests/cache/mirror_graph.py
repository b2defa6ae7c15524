"""A small graph reading a mirrored input, for the mirrored-input tests (importable, so workers load it).

    mirrored/count (reads mirrored CORPUS: every file's lines) ──> total (target)
    other (target, reads nothing mirrored)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor import ExecutorStep, mirrored, open_file, output_path_of, this_output_path, url_to_fs

CORPUS = "memory://corpus-bucket/raw/corpus"  # the logical path: nothing there in a fresh process
FILES = {"part-0.txt": "to be or not to be\n" * 1000, "sub/part-1.txt": "that is the question\n" * 2000}


@dataclass(frozen=True)
class CountConfig:
    corpus: Any
    output_path: str


def count_lines(config: CountConfig) -> dict:
    fs, root = url_to_fs(config.corpus)
    lines = sum(len(fs.cat_file(p).splitlines()) for p in sorted(fs.find(root)) if "/.executor/" not in p)
    with open_file(f"{config.output_path}/count.txt", "w") as f:
        f.write(f"{lines}\n")
    return {"lines": lines, "read_from": config.corpus}


@dataclass(frozen=True)
class TotalConfig:
    count_path: Any
    output_path: str


def total(config: TotalConfig) -> dict:
    with open_file(config.count_path) as f:
        lines = int(f.read())
    with open_file(f"{config.output_path}/total.txt", "w") as f:
        f.write(f"total {lines}\n")
    return {"total": lines}


@dataclass(frozen=True)
class OtherConfig:
    text: str
    output_path: str


def other(config: OtherConfig) -> dict:
    with open_file(f"{config.output_path}/other.txt", "w") as f:
        f.write(config.text)
    return {}


def build(corpus: str = CORPUS) -> list[ExecutorStep]:
    count = ExecutorStep("mirrored/count", count_lines, CountConfig(mirrored(corpus), this_output_path()))
    summed = ExecutorStep("mirrored/total", total, TotalConfig(output_path_of(count, "count.txt"), this_output_path()))
    return [summed, ExecutorStep("mirrored/other", other, OtherConfig("x", this_output_path()))]


def write_corpus(root) -> int:
    """The corpus's files under `root` (a local directory standing for one bucket's copy); its byte count."""
    from pathlib import Path

    for name, text in FILES.items():
        path = Path(root) / "raw" / "corpus" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sum(len(t) for t in FILES.values())
