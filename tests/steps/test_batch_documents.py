"""`python -m steps.train.batch_documents OUT N`: the documents and token ranges listed for step N
of a real tiny run rebuild exactly the batch that step trained on."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from steps.token_cache import TokenSplit
from tests.steps.test_train import REPO, cache, tiny_config  # noqa: F401  (fixture)

# JAX is imported inside the tests, never when this module is collected (tests/steps/test_train.py
# says why); the `jax` marker orders this file after those that do not import JAX.
pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def trained(cache, tmp_path_factory):  # noqa: F811
    from steps.train import train

    out = tmp_path_factory.mktemp("train") / "run"
    train(tiny_config(cache, out, num_steps=3, checkpoint_every=3, batch_size=4))
    return out


def test_listed_documents_rebuild_the_batch_of_that_step(cache, trained):  # noqa: F811
    from steps.train.batch_documents import batch_documents
    from steps.train.data import BatchSource

    split = TokenSplit.open(cache, "train")
    docs = [ids for ids, _ in split.documents()]
    source = BatchSource(split, 32, 4, seed=0)
    for step in (1, 3):
        result = batch_documents(str(trained), step)
        expected = source.batch(step - 1)          # step N (metrics numbering) used batch N-1
        assert result["batch_index"] == step - 1 and len(result["rows"]) == 4
        for row, listed in zip(expected, result["rows"]):
            rebuilt = np.concatenate([docs[d["global_index"]][d["token_start"]:d["token_end"]]
                                      for d in listed["documents"]])
            np.testing.assert_array_equal(rebuilt, row)
            assert all(d["shard"] and d["index"] >= 0 for d in listed["documents"])


def test_command_prints_a_table_json_and_clear_errors(trained, capsys):
    from steps.train.batch_documents import batch_documents, main

    # the command itself, once, in a process of its own (-X importtime lists what it imported)
    table = subprocess.run([sys.executable, "-X", "importtime", "-m", "steps.train.batch_documents", str(trained), "2"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("step 2 (batch 1)") and "[" in table.stdout
    # it reads the run's files only: it starts without JAX (steps.train imports `train` when asked)
    imported = {line.rsplit("|", 1)[-1].strip() for line in table.stderr.splitlines() if line.startswith("import time:")}
    assert "steps.train.data" in imported and "jax" not in imported

    # its other outputs through the same main(), in this process (an exception would fail the test:
    # no traceback reaches the user)
    def run(*args):
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run(str(trained), "2", "--json")
    assert code == 0 and json.loads(out) == batch_documents(str(trained), 2)
    code, _, err = run(str(trained), "99")
    assert code == 2 and "step=99 is outside 1..3" in err
    code, _, err = run(str(trained.parent / "nothing"), "1")
    assert code == 2 and "data.json: not found" in err
