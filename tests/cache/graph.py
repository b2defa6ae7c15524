"""A small graph for the cache-from tests (importable, so the runners' workers can load its steps).

    raw (a ~1 MiB file) ──> upper ──> report (target, ~1 MiB)
    notes (target, two small files)
"""

from __future__ import annotations

from dataclasses import dataclass

from executor import ExecutorStep, open_file, output_path_of, this_output_path

MIB = 1 << 20


@dataclass(frozen=True)
class RawConfig:
    seed: str
    output_path: str


def make_raw(config: RawConfig) -> dict:
    line = (config.seed * 64)[:63] + "\n"
    with open_file(f"{config.output_path}/raw.txt", "w") as f:
        f.write(line * (MIB // 64))
    return {"bytes": MIB}


@dataclass(frozen=True)
class UpperConfig:
    raw_path: str
    output_path: str


def make_upper(config: UpperConfig) -> dict:
    with open_file(config.raw_path, "r") as f:
        head = f.read(1000)
    with open_file(f"{config.output_path}/upper.txt", "w") as f:
        f.write(head.upper())
    return {"chars": len(head)}


@dataclass(frozen=True)
class ReportConfig:
    upper_path: str
    output_path: str


def make_report(config: ReportConfig) -> dict:
    with open_file(config.upper_path, "r") as f:
        text = f.read()
    with open_file(f"{config.output_path}/report.txt", "w") as f:
        f.write((text * (MIB // len(text) + 1))[:MIB])
    return {"report": text[:20]}


@dataclass(frozen=True)
class NotesConfig:
    text: str
    output_path: str


def make_notes(config: NotesConfig) -> dict:
    for name in ("a.txt", "sub/b.txt"):
        with open_file(f"{config.output_path}/{name}", "w") as f:
            f.write(f"{name}: {config.text}\n")
    return {"notes": 2, "first": f"{config.output_path}/a.txt"}


def build(seed: str = "abc") -> list[ExecutorStep]:
    raw = ExecutorStep("cache/raw", make_raw, RawConfig(seed, this_output_path()))
    upper = ExecutorStep("cache/upper", make_upper, UpperConfig(output_path_of(raw, "raw.txt"), this_output_path()))
    report = ExecutorStep("cache/report", make_report,
                          ReportConfig(output_path_of(upper, "upper.txt"), this_output_path()))
    notes = ExecutorStep("cache/notes", make_notes, NotesConfig(seed, this_output_path()))
    return [report, notes]
