"""A tokenize step (one output shard per input file, incremental) for the two-runner shard tests
(tests/steps/test_shard_claims.py), on any prefix:

    python tests/steps/grow_experiment.py --prefix P --runner inline

GROW_CORPUS: the input folder; GROW_TOKENIZER: a tokenizer.json. Each shard this runner encodes leaves
an evidence file `made-<shard>-<uuid>` in GROW_SIDEFX (a local folder), so a test counts real work;
GROW_SLEEP_S: seconds each encode sleeps after it. GROW_BARRIER (a local folder) and GROW_PEERS (a
count): before tokenizing, the step writes `ready-<pid>` there and waits until GROW_PEERS runners
have, so two runners reach their shards together. GROW_CLAIM_TTL_S: the shard claims' TTL (default
ClaimSettings'), heartbeat a tenth of it.
"""

from __future__ import annotations

import glob
import os
import time
import uuid

from executor import ClaimSettings, ExecutorStep, executor_main, this_output_path
from steps import shard_reuse
from steps import tokenize as tokenize_module
from steps.tokenize import TokenizeConfig, tokenize


def _counted(encode):
    def encode_and_count(job, *rest):
        result = encode(job, *rest)
        with open(os.path.join(os.environ["GROW_SIDEFX"], f"made-{job.name}-{uuid.uuid4().hex}"), "x") as f:
            f.write(str(os.getpid()))
        time.sleep(float(os.environ.get("GROW_SLEEP_S", "0")))
        return result
    return encode_and_count


def _meet_peers() -> None:
    barrier = os.environ.get("GROW_BARRIER")
    if not barrier:
        return
    with open(os.path.join(barrier, f"ready-{os.getpid()}"), "x"):
        pass
    deadline = time.monotonic() + 120
    while len(glob.glob(os.path.join(barrier, "ready-*"))) < int(os.environ["GROW_PEERS"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{barrier}: the other runner never arrived")
        time.sleep(0.05)


def counted_tokenize(config: TokenizeConfig) -> dict:
    """tokenize, counting the shards this process encodes (GROW_SIDEFX)."""
    if os.environ.get("GROW_SIDEFX") and not hasattr(tokenize_module._encode_shard, "__wrapped_count__"):
        counted = _counted(tokenize_module._encode_shard)
        counted.__wrapped_count__ = True
        tokenize_module._encode_shard = counted
    use_claim_ttl()
    _meet_peers()
    return tokenize(config)


def use_claim_ttl() -> None:
    """Shard claims with GROW_CLAIM_TTL_S's TTL (when set), heartbeat a tenth of it."""
    ttl = os.environ.get("GROW_CLAIM_TTL_S")
    if ttl and not hasattr(shard_reuse.reuse_or_make, "__claim_ttl__"):
        plain = shard_reuse.reuse_or_make

        def with_ttl(*args, **kwargs):
            return plain(*args, **kwargs, settings=ClaimSettings(ttl_s=float(ttl), heartbeat_s=float(ttl) / 10))
        with_ttl.__claim_ttl__ = True
        shard_reuse.reuse_or_make = with_ttl


tokenized = ExecutorStep("tokenized", counted_tokenize,
                         TokenizeConfig(os.environ.get("GROW_CORPUS", "corpus"), this_output_path(),
                                        tokenizer_path=os.environ.get("GROW_TOKENIZER"), num_output_shards=0,
                                        validation_fraction=0.2))

if __name__ == "__main__":
    executor_main(steps=[tokenized], description="tokenize a growing corpus")
