"""Fixed step declarations whose ids are pinned in golden_ids.json.

Changing the canonical encoding changes these ids: that must be a visible, deliberate decision
(with a way to carry existing outputs over; regenerate with `uv run python -m tests.executor.golden_configs`).
golden_ids_legacy.json holds the ids of before issue 44 (classes named with their module), which
executor/core/legacy_ids.py must keep making: it is never regenerated.
"""

from __future__ import annotations

import enum
import json
import pathlib
from dataclasses import dataclass, field

from executor import ExecutorStep, execution_only, output_path_of, secret, this_output_path
from executor.core.graph import build_graph

GOLDEN_FILE = pathlib.Path(__file__).with_name("golden_ids.json")
LEGACY_GOLDEN_FILE = pathlib.Path(__file__).with_name("golden_ids_legacy.json")


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass(frozen=True)
class Inner:
    rate: float = 0.5
    tags: tuple = ("a", "b")


@dataclass(frozen=True)
class GoldenConfig:
    output_path: object = None
    input_path: object = None
    count: int = 3
    ratio: float = 0.25
    name: str = "golden"
    flags: frozenset = frozenset({"x", "y"})
    blob: bytes = b"\x00\x01"
    mode: Mode = Mode.FAST
    path: pathlib.PurePosixPath = pathlib.PurePosixPath("data/a.txt")
    extra: dict = field(default_factory=lambda: {"b": [1, 2.0, None, True], "a": {"nested": "yes"}})
    inner: Inner = Inner()
    workers: int = execution_only(4)
    token: str = secret("not-hashed")


def golden_fn(config: GoldenConfig) -> None:
    return None


def golden_steps() -> list[ExecutorStep]:
    root = ExecutorStep("golden/root", golden_fn, GoldenConfig(output_path=this_output_path()))
    child = ExecutorStep("golden/child", golden_fn,
                         GoldenConfig(output_path=this_output_path("sub"), input_path=output_path_of(root, "part")),
                         code_version="v2")
    return [root, child]


def golden_ids() -> dict[str, str]:
    graph = build_graph(golden_steps())
    return {n.name: n.digest for n in graph.nodes.values()}


def write_golden_file() -> None:
    GOLDEN_FILE.write_text(json.dumps(golden_ids(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN_FILE}")


if __name__ == "__main__":
    # Import under the real module name (the legacy ids named the module; today's do not).
    from tests.executor.golden_configs import write_golden_file as write

    write()
