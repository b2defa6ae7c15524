"""Which extra each part of the step library needs: importing a part whose packages are missing is
an error naming the extra (`pip install 'stepgraph[train]'`), not a bare ModuleNotFoundError.

`[data]`: the data steps (documents, download, tokenize, bpe, token_cache, dedup, data);
`[train]`: training and evaluation (train, eval, lm_harness), `[data]` included. The check looks
the packages up without importing them (importlib.util.find_spec).
"""

from __future__ import annotations

import importlib.util

DATA = ("numpy", "pyarrow", "xxhash", "tokenizers", "zstandard")
TRAIN = ("jax", "optax", *DATA)


def require_extra(extra: str, part: str, modules: tuple[str, ...]) -> None:
    """ModuleNotFoundError naming `extra` when any of `modules` cannot be found."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        error = ModuleNotFoundError(
            f"{part} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed: "
            f"pip install 'stepgraph[{extra}]' (from a checkout: uv sync, which installs every extra)")
        error.name = missing[0]
        raise error
