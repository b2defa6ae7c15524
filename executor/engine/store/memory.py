"""In-memory coordination store for tests and the in-process runner (`memory://` prefixes).

Stores with the same root share their objects within a process, like fsspec's memory filesystem.
"""

from __future__ import annotations

import itertools
import threading
from typing import Iterator, Sequence

from executor.engine.store.base import Versioned

_LOCK = threading.Lock()
_OBJECTS: dict[str, dict[str, Versioned]] = {}
_COUNTER = itertools.count(1)


class MemoryStore:
    def __init__(self, root: str):
        self.root = root
        with _LOCK:
            self._objects = _OBJECTS.setdefault(root, {})

    def read(self, key: str) -> Versioned | None:
        with _LOCK:
            return self._objects.get(key)

    def read_many(self, keys: Sequence[str]) -> Iterator[Versioned | None]:
        with _LOCK:  # one consistent view of all the keys
            found = [self._objects.get(key) for key in keys]
        yield from found

    def _put(self, key: str, data: bytes) -> str:
        generation = str(next(_COUNTER))
        self._objects[key] = Versioned(bytes(data), generation)
        return generation

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        with _LOCK:
            if key in self._objects:
                return None
            return self._put(key, data)

    def replace_if_generation(self, key: str, data: bytes, generation: str) -> str | None:
        with _LOCK:
            current = self._objects.get(key)
            if current is None or current.generation != generation:
                return None
            return self._put(key, data)

    def delete(self, key: str) -> None:
        with _LOCK:
            self._objects.pop(key, None)

    def list_generations(self, prefix: str, suffix: str) -> dict[str, str]:
        with _LOCK:
            return {
                k: v.generation
                for k, v in self._objects.items()
                if k.startswith(prefix) and k.endswith(suffix)
            }
