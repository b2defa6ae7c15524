"""Checkpoints on gs:// (fake-gcs-server) and s3:// (moto), written by the asynchronous writer:
they commit by marker (no directory move), torn ones are skipped, and restore is exact."""

from __future__ import annotations

import numpy as np
import pytest

from executor.core.locations import Storage
from executor.engine.prefix import location

try:
    from emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures)
except ImportError:
    from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


@pytest.mark.parametrize("emulator", ["gcs_emulator", "s3_emulator"])
def test_async_checkpoints_on_object_stores_commit_by_marker_and_skip_torn_ones(emulator, request):
    import jax

    from steps.train import checkpoint
    from steps.train.config import TrainConfig
    from steps.train.loop import CheckpointWriter

    emu = request.getfixturevalue(emulator)
    out = emu.fresh_prefix("ckpt")
    with location.using(Storage({out: emu.storage_options})):  # as the runner does around a step
        config = TrainConfig(cache_path="unused", output_path=out, keep_checkpoints=5)
        state = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.int32(2)}
        later = jax.tree.map(lambda x: x * 3, state)
        writer = CheckpointWriter(background=True)
        writer.save(config, out, 2, state, [{"step": 1}, {"step": 2}])
        writer.save(config, out, 4, later, [{"step": 4}])
        writer.close()
        assert checkpoint.committed_steps(out) == [2, 4]
        restored = checkpoint.restore(out, 4, state)
        assert all(a.dtype == b.dtype and np.array_equal(a, b)
                   for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(later)))
        fs, root = location.url_to_fs(out)
        fs.rm(f"{root}/checkpoints/step-000004/COMMITTED")      # as if killed before the marker
        fs.invalidate_cache()
        messages = []
        assert checkpoint.latest_complete(out, log=messages.append) == 2
        assert any("step-000004" in m for m in messages)
        assert fs.cat_file(f"{root}/metrics.jsonl").decode().count("\n") == 1   # the last save's rows
