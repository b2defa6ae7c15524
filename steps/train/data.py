"""Training batches as a pure function of (seed, step) over a token cache split.

The split's token stream is cut into non-overlapping windows of `seq_len + 1` tokens; each
epoch visits every window once in a permutation drawn from (seed, epoch). Sample g of the run
(step * batch_size + row) is window `perm(seed, g // n_windows)[g % n_windows]`. So any step's
batch can be rebuilt without replaying the run, resume is exact, and `documents_in_step`
answers "which documents were in step N".
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from steps.token_cache import TokenSplit


class BatchSource:
    """Deterministic batches of [batch_size, seq_len + 1] token ids from one split."""

    def __init__(self, split: TokenSplit, seq_len: int, batch_size: int, seed: int):
        self.split, self.seq_len, self.batch_size, self.seed = split, seq_len, batch_size, seed
        self.window_len = seq_len + 1
        self.n_windows = split.num_tokens // self.window_len
        if self.n_windows < 1:
            raise ValueError(f"{split.root}/{split.split}: {split.num_tokens} tokens is fewer than one "
                             f"training window of seq_len+1={self.window_len}; lower seq_len or add data")
        self._permutation = lru_cache(maxsize=2)(self._epoch_permutation)

    def _epoch_permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n_windows)

    def window_starts(self, step: int) -> np.ndarray:
        """Token offsets (into the split's stream) of the rows of batch `step`."""
        g = step * self.batch_size + np.arange(self.batch_size)
        starts = np.empty(self.batch_size, dtype=np.int64)
        for row, sample in enumerate(g):
            epoch, index = divmod(int(sample), self.n_windows)
            starts[row] = self._permutation(epoch)[index] * self.window_len
        return starts

    def batch(self, step: int) -> np.ndarray:
        return self.rows(step, slice(None))

    def rows(self, step: int, which: slice) -> np.ndarray:
        """Rows `which` of batch `step`, reading only their windows (a host reads its own slice)."""
        rows = [self.split.window(int(s), self.window_len) for s in self.window_starts(step)[which]]
        return np.stack(rows).astype(np.int32)

    def documents_in_step(self, step: int) -> list[int]:
        """Global indices (in stream order) of documents with at least one token in batch `step`."""
        token_starts, docs = [], set()
        base = 0
        for off in self.split.offsets:
            token_starts.append(np.asarray(off[:-1]) + base)
            base += int(off[-1])
        first_token_of_doc = np.concatenate(token_starts) if token_starts else np.zeros(0, np.int64)
        for start in self.window_starts(step):
            lo = np.searchsorted(first_token_of_doc, start, side="right") - 1
            hi = np.searchsorted(first_token_of_doc, start + self.window_len - 1, side="right") - 1
            docs.update(range(int(lo), int(hi) + 1))
        return sorted(docs)
