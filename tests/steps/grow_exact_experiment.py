"""An exact dedup step (incremental) for the two-runner shard tests of exact dedup
(tests/steps/test_exact_dedup_claims.py), on any prefix:

    python tests/steps/grow_exact_experiment.py --prefix P --runner inline

GROW_CORPUS: the input folder. Each shard this runner hashes or writes leaves an evidence file
`hash-<shard>-<uuid>` or `write-<shard>-<uuid>` in GROW_SIDEFX (a local folder), so a test counts
real work; GROW_SLEEP_S: seconds each of them sleeps after it (before its result is recorded).
GROW_BARRIER and GROW_PEERS: as in grow_experiment.py (the runners meet before deduplicating).
"""

from __future__ import annotations

import os
import time
import uuid

from executor import ExecutorStep, executor_main, this_output_path
from steps.dedup import exact as exact_module
from steps.dedup.exact import ExactDedupConfig, exact_dedup
from grow_experiment import _meet_peers  # this folder (the script's own)


def _evidence(kind: str, shard: str) -> None:
    with open(os.path.join(os.environ["GROW_SIDEFX"], f"{kind}-{shard}-{uuid.uuid4().hex}"), "x") as f:
        f.write(str(os.getpid()))
    time.sleep(float(os.environ.get("GROW_SLEEP_S", "0")))


def _count_work() -> None:
    hash_shard, write_shard = exact_module._hash_shard, exact_module.write_dedup_shard_hashed

    def counted_hash(plan, k):
        result = hash_shard(plan, k)
        _evidence("hash", plan.names[k])
        return result

    def counted_write(job):
        result = write_shard(job)
        if not result[0]["resumed"]:
            _evidence("write", job.name)
        return result

    exact_module._hash_shard, exact_module.write_dedup_shard_hashed = counted_hash, counted_write


def counted_exact_dedup(config: ExactDedupConfig) -> dict:
    """exact_dedup, counting the shards this process hashes and writes (GROW_SIDEFX)."""
    if os.environ.get("GROW_SIDEFX") and not hasattr(exact_module, "_counted_for_test"):
        _count_work()
        exact_module._counted_for_test = True
    _meet_peers()
    return exact_dedup(config)


deduped = ExecutorStep("deduped", counted_exact_dedup,
                       ExactDedupConfig(os.environ.get("GROW_CORPUS", "corpus"), this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[deduped], description="exact dedup of a growing corpus")
