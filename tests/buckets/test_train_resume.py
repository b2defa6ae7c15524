"""Training on a bucket: checkpoints commit on S3 and GCS (a marker written last, no directory
move) and a second call resumes from the latest one, running only the later steps."""

from __future__ import annotations

import pytest

from executor.engine.prefix import location
from tests.steps.test_train import tiny_config

# JAX is imported inside the test, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    from steps.train.synthetic import write_synthetic_cache

    return str(write_synthetic_cache(tmp_path_factory.mktemp("cache") / "tokens", n_train=120, n_validation=12))


def test_checkpoints_commit_and_training_resumes_on_a_bucket(bucket, cache):
    from steps.train import checkpoint, train

    with location.using(bucket.storage):  # as the runner does around a step
        out = f"{bucket.prefix}/train"
        first = train(tiny_config(cache, out, num_steps=4, checkpoint_every=2, keep_checkpoints=5))
        assert first["steps_run"] == 4 and checkpoint.committed_steps(out) == [2, 4]
        more = train(tiny_config(cache, out, num_steps=6, checkpoint_every=2, keep_checkpoints=5))
        assert more["resumed_from_step"] == 4 and more["steps_run"] == 2 and more["final_step"] == 6
        assert checkpoint.committed_steps(out) == [2, 4, 6]
    assert not [p for p in bucket.objects() if ".tmp-" in p]
