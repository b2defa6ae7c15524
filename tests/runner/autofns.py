"""Step functions for the auto runner's tests (importable, so Ray workers can load them): each
says where it ran, through the runner's own `current_node` (a Ray node id on Ray, else the host)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor import current_node, map_shards


@dataclass(frozen=True)
class Where:
    output_path: str
    after: Any = None  # another step's output path: runs after it


def _on_ray() -> bool:
    return current_node() != socket.gethostname()


def where(config: Where) -> dict:
    print(f"where: pid {os.getpid()}", flush=True)
    return {"on_ray": _on_ray(), "pid": os.getpid(), "ppid": os.getppid()}


def shard_on_ray(item: int) -> bool:
    return _on_ray()


def fan(config: Where) -> dict:
    """Counts its starts in its output dir, then fans out three shards."""
    starts = Path(config.output_path) / "starts"
    with starts.open("a") as f:
        f.write(f"{_on_ray()}\n")
    shards = map_shards(shard_on_ray, [1, 2, 3])
    return {"on_ray": _on_ray(), "shards_on_ray": shards, "starts": starts.read_text().split()}
