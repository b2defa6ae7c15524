"""What runs beside a step's function on its worker: shard fan-out through the runner the step runs
on (parallel: map_shards), the multi-host bootstrap of jax.distributed (multihost), throttled
progress lines for long work inside a step (progress), and what an incremental data step reuses
shard results through: the prefixes it may take them from (shard_sources: the run's and its
--cache-from prefixes) and a claim per shard so two runners make it once (claims: the run loop's
own lease protocol).
"""
