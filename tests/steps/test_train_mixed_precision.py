"""Training in bfloat16 (TrainConfig.compute_dtype): the losses of 100 steps track float32's,
parameters and checkpoints stay float32, and a checkpoint saved in one dtype resumes in the other."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.steps.test_train import cache, tiny_config  # noqa: F401  (fixture)

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax

# Largest gap allowed between the bf16 and f32 loss at any logged step of 100 (nats; the loss falls
# from ~4.0 to ~0.5). Measured on this model and data: at most 0.008, at step 60.
LOSS_TOLERANCE = 0.03


def losses(out) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def stored_dtypes(out, subdir: str, step: int) -> set[str]:
    manifest = json.loads((out / subdir / f"step-{step:06d}" / "state.json").read_text())
    return {leaf["dtype"] for leaf in manifest["leaves"]}


def hundred_steps_config(cache, out, dtype):  # noqa: F811
    return tiny_config(cache, out, num_steps=100, log_every=10, checkpoint_every=50, compute_dtype=dtype)


@pytest.fixture(scope="module")
def hundred_steps(cache, tmp_path_factory):  # noqa: F811
    """100 steps in each compute dtype: {dtype: (output, result)} (the resume test below reuses the
    runs and their compiled steps)."""
    from steps.train import train

    root = tmp_path_factory.mktemp("dtypes")
    return {dtype: (root / dtype, train(hundred_steps_config(cache, root / dtype, dtype)))
            for dtype in ("float32", "bfloat16")}


def test_bfloat16_losses_track_float32_for_100_steps_and_stay_float32(hundred_steps):
    from steps.train.loop import MODEL_SUBDIR

    runs = {}
    for dtype, (out, result) in hundred_steps.items():
        runs[dtype] = losses(out)
        assert stored_dtypes(out, "checkpoints", 100) <= {"float32", "int32"}
        assert stored_dtypes(out, MODEL_SUBDIR, 100) == {"float32"}
        assert np.isfinite(result["final_loss"])
    f32, bf16 = runs["float32"], runs["bfloat16"]
    assert list(f32) == list(bf16) == list(range(10, 101, 10))
    gaps = [abs(bf16[s] - f32[s]) for s in f32]
    assert max(gaps) <= LOSS_TOLERANCE, list(zip(f32.values(), bf16.values()))
    assert bf16[100] < bf16[10] - 0.5       # and it learns, as float32 does
    assert any(gap > 0 for gap in gaps)     # it did compute in another dtype


def test_a_checkpoint_saved_in_one_dtype_resumes_in_the_other(cache, hundred_steps, tmp_path, capsys):  # noqa: F811
    from steps.train import train
    from steps.train.loop import MODEL_SUBDIR

    for saved, resumed in (("float32", "bfloat16"), ("bfloat16", "float32")):
        out = tmp_path / saved
        shutil.copytree(hundred_steps[saved][0], out)          # the 100 steps trained in `saved`
        shutil.rmtree(out / "checkpoints" / "step-000100")   # as if it had stopped after checkpoint 50
        shutil.rmtree(out / MODEL_SUBDIR)
        capsys.readouterr()
        result = train(hundred_steps_config(cache, out, resumed))
        assert "resumed from checkpoint step 50" in capsys.readouterr().out
        assert result["resumed_from_step"] == 50 and result["steps_run"] == 50 and np.isfinite(result["final_loss"])
        assert stored_dtypes(out, "checkpoints", 100) <= {"float32", "int32"}
        assert stored_dtypes(out, MODEL_SUBDIR, 100) == {"float32"}


def test_compute_dtype_is_validated(tmp_path):
    from steps.train import TrainConfig, checkpoint, train

    with pytest.raises(ValueError, match=r"compute_dtype='float16' is not one of \['float32', 'bfloat16'\]"):
        TrainConfig(cache_path="c", output_path=str(tmp_path), compute_dtype="float16")
