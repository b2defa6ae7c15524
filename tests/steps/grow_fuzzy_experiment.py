"""A fuzzy dedup step (incremental) for the two-runner shard tests (tests/steps/test_fuzzy_shard_claims.py),
on any prefix:

    python tests/steps/grow_fuzzy_experiment.py --prefix P --runner inline

GROW_CORPUS: the input folder. Each shard whose MinHash band keys this runner computes leaves an
evidence file `made-<shard>-<uuid>` in GROW_SIDEFX (a local folder), and each shard it writes (kept
documents and attributes, not resumed) `write-<shard>-<uuid>`, so a test counts real work;
GROW_SLEEP_S: seconds each computation and each write sleeps after it (before its result is recorded);
GROW_WRITE_SLEEP_S: seconds each write after the first GROW_WRITES_FIRST (default 0) sleeps before it
starts (`started-<shard>-<uuid>` then marks it in flight). GROW_CLAIM_TTL_S: the shard claims' TTL.
GROW_BARRIER and GROW_PEERS: the runners meet before deduplicating
(tests/steps/grow_experiment.py's barrier).
"""

from __future__ import annotations

import os
import time
import uuid

from executor import ExecutorStep, executor_main, this_output_path
from steps.dedup import FuzzyDedupConfig, fuzzy_dedup
from steps.dedup import fuzzy as fuzzy_module
from steps.dedup import fuzzy_reuse
from steps.documents import shard_names
from grow_experiment import _meet_peers, use_claim_ttl  # this folder is on the path: the script is run as a file


def _evidence(kind: str, shard: str, sleep: str = "GROW_SLEEP_S") -> None:
    with open(os.path.join(os.environ["GROW_SIDEFX"], f"{kind}-{shard}-{uuid.uuid4().hex}"), "x") as f:
        f.write(str(os.getpid()))
    time.sleep(float(os.environ.get(sleep, "0")))


def _counted(compute):
    def compute_and_count(plan, k):
        result = compute(plan, k)
        _evidence("made", shard_names(plan.shards)[k])
        return result
    return compute_and_count


def _counted_write(write):
    done: list[str] = []  # this process's writes

    def write_and_count(job):
        if os.environ.get("GROW_WRITE_SLEEP_S") and len(done) >= int(os.environ.get("GROW_WRITES_FIRST", "0")):
            _evidence("started", job.name, "GROW_WRITE_SLEEP_S")
        result = write(job)
        if not result[0]["resumed"]:
            _evidence("write", job.name)
        done.append(job.name)
        return result
    return write_and_count


def counted_fuzzy_dedup(config: FuzzyDedupConfig) -> dict:
    """fuzzy_dedup, counting the shards whose band keys this process computes (GROW_SIDEFX)."""
    if os.environ.get("GROW_SIDEFX") and not hasattr(fuzzy_module._band_keys_of_shard, "__wrapped_count__"):
        counted = _counted(fuzzy_module._band_keys_of_shard)
        counted.__wrapped_count__ = True
        fuzzy_module._band_keys_of_shard = counted
        fuzzy_reuse.write_dedup_shard_hashed = _counted_write(fuzzy_reuse.write_dedup_shard_hashed)
    use_claim_ttl()
    _meet_peers()
    return fuzzy_dedup(config)


deduped = ExecutorStep("fuzzy-deduped", counted_fuzzy_dedup,
                       FuzzyDedupConfig(os.environ.get("GROW_CORPUS", "corpus"), this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[deduped], description="fuzzy dedup of a growing corpus")
