"""The experiments' own small steps read and write through executor.open_file, so they work on a
bucket as on a disk: moe_isoflop's plot step on the S3 emulator (credentials only as options)."""

from __future__ import annotations

import json

import pytest

from executor import open_file
from executor.engine.prefix import location
from tests.buckets.conftest import make_bucket

# JAX is imported inside the test (experiments.moe_isoflop imports it), never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


def test_the_isoflop_plot_step_reads_and_writes_a_bucket(s3_emulator):
    from experiments.moe_isoflop import PlotConfig, plot_isoflop

    bucket = make_bucket(s3_emulator, "plot")
    with location.using(bucket.storage):  # as the runner does around a step
        evals = [f"{bucket.prefix}/eval-{i}" for i in range(3)]
        for i, path in enumerate(evals):
            with open_file(f"{path}/results.json", "w") as f:
                json.dump({"model": {"bits_per_byte": 3.0 - i / 10}}, f)
        result = plot_isoflop(PlotConfig(evals, [1e12, 1e12, 1e12], [32, 64, 96], f"{bucket.prefix}/plot"))
    objects = bucket.objects()
    assert objects["plot/isoflop.png"].startswith(b"\x89PNG")
    assert [p["width"] for p in json.loads(objects["plot/isoflop.json"])] == [32, 64, 96]
    assert result["best_width_per_budget"] == {"1e+12": 96}
