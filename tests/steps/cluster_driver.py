"""Dedup on a simulated three-node Ray cluster (ray.cluster_utils.Cluster), run as its own process.

    python tests/steps/cluster_driver.py WORKDIR   ->  prints one JSON line of findings

Used by tests/steps/test_dedup_cluster.py (one cluster for the whole module): references computed
in this process without Ray, then exact and fuzzy dedup on the cluster, fuzzy dedup while a node
is removed mid-step, and a shard task that kills its own worker on every attempt.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def kill_own_worker(item: int) -> int:
    """A shard task whose worker dies on every attempt (as if killed for memory)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return item


def start_cluster(nodes: int, tries: int = 3):
    """A head and nodes-1 more one-CPU nodes (resources nodeK); retried when a node times out
    while starting, which happens on a heavily loaded machine."""
    import ray
    import ray._private.services as services
    from ray.cluster_utils import Cluster

    # Ray waits a fixed 30 s for a new raylet to register with the GCS (node.py); on this shared
    # 2-core machine under load a node often needs longer. Let each registration check wait up to
    # 3 minutes for the node to appear instead of failing the whole start.
    get_node = services.get_node
    if not getattr(get_node, "patient", False):
        def patient_get_node(*args, **kwargs):
            deadline = time.monotonic() + 180
            while True:
                try:
                    return get_node(*args, **kwargs)
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        patient_get_node.patient = True
        services.get_node = patient_get_node
    from executor.engine.runner.ray_env import free_ports

    def node_ports() -> dict:
        # The agents' default ports (52365, ...) are taken by any other Ray cluster on the machine.
        agent, metrics, runtime_env = free_ports(3)
        return {"dashboard_agent_listen_port": agent, "metrics_export_port": metrics,
                "runtime_env_agent_port": runtime_env}

    for attempt in range(1, tries + 1):
        cluster = None
        try:
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "resources": {"node0": 1}, "include_dashboard": False,
                "object_store_memory": 80 << 20, **node_ports()})
            workers = [cluster.add_node(num_cpus=1, resources={f"node{k}": 1}, object_store_memory=80 << 20,
                                        **node_ports()) for k in range(1, nodes)]
            ray.init(address=cluster.address)
            cluster.wait_for_nodes()
            return cluster, workers
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception when a node times out
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            if attempt == tries:
                raise


def warm_node() -> str:
    """Runs once on a node so that it has a started worker that has imported dedup."""
    import ray

    import steps.dedup.fuzzy  # noqa: F401 - the import a shard task's first call would pay

    return ray.get_runtime_context().get_node_id()


def warm_every_node() -> None:
    """A worker of this driver's job started and ready on every live node, before tasks are
    counted by where they ran.

    Ray starts the head's workers with the driver; another node starts its first worker (for this
    job) only when a task spills to it, which on a loaded or cold machine took longer than a whole
    stage of small shard tasks: the head's one worker then ran every task (all stages on one node,
    seen once in CI)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    remote = ray.remote(num_cpus=1)(warm_node)
    ran_on = ray.get([remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                      for node in nodes])
    assert sorted(ran_on) == sorted(nodes), (ran_on, nodes)


def kept(output: str) -> list[str]:
    from steps.documents import list_document_files, read_documents

    return [d["id"] for p in list_document_files(f"{output}/docs") for d in read_documents(p)]


def main(work: str) -> None:
    from executor.engine.runner.ray_env import LOOPBACK_ENV, prepare_loopback_environment

    prepare_loopback_environment()
    for key, value in LOOPBACK_ENV.items():  # this driver script's own process: Cluster(...) reads them here
        os.environ.setdefault(key, value)
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")  # a loaded machine starts nodes slowly
    os.environ["PYTHONPATH"] = f"{REPO}:{os.environ.get('PYTHONPATH', '')}"
    from steps.data.synthetic import generate_corpus
    from steps.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup, fuzzy_dedup

    corpus = generate_corpus(seed=11, num_originals=200, mean_words=120, exact_fraction=0.08,
                             near_fraction=0.08, boilerplate_sites=3, pages_per_site=5)
    corpus.write(f"{work}/in", num_shards=4)
    found: dict = {}
    found["reference_exact"] = (exact_dedup(ExactDedupConfig(f"{work}/in", f"{work}/ref-exact")), kept(f"{work}/ref-exact"))[1]
    found["reference_fuzzy"] = (fuzzy_dedup(FuzzyDedupConfig(f"{work}/in", f"{work}/ref-fuzzy")), kept(f"{work}/ref-fuzzy"))[1]

    import ray

    cluster, workers = start_cluster(3)
    try:
        found["nodes"] = sum(n["Alive"] for n in ray.nodes())
        warm_every_node()
        exact_dedup(ExactDedupConfig(f"{work}/in", f"{work}/cluster-exact", partition_bytes=60_000))
        found["cluster_exact"] = kept(f"{work}/cluster-exact")
        result = fuzzy_dedup(FuzzyDedupConfig(f"{work}/in", f"{work}/cluster-fuzzy", partition_bytes=60_000))
        found["cluster_fuzzy"] = kept(f"{work}/cluster-fuzzy")
        found["cluster_fuzzy_partitions"] = result["partitions"]
        found["cluster_fuzzy_nodes_per_stage"] = result["nodes_per_stage"]

        # A node removed while fuzzy dedup's tasks run on it: Ray retries them elsewhere.
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = fuzzy_dedup(FuzzyDedupConfig(f"{work}/in", f"{work}/node-lost",
                                                                 partition_bytes=60_000))
            except BaseException as e:  # noqa: BLE001 - reported to the test
                outcome["error"] = repr(e)

        thread = threading.Thread(target=run)
        thread.start()
        done = Path(f"{work}/node-lost/.work/fuzzy/lsh/done")
        deadline = time.monotonic() + 300
        while not (done.exists() and any(done.iterdir())) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        found["removed_mid_step"] = thread.is_alive()
        cluster.remove_node(workers[0])
        thread.join()
        found["node_lost_error"] = outcome.get("error")
        found["node_lost_fuzzy"] = kept(f"{work}/node-lost") if "result" in outcome else None

        from executor.engine.worker.parallel import map_shards

        started = time.monotonic()
        try:
            map_shards(kill_own_worker, [0, 1])
            found["dying_error"] = None
        except Exception as e:  # noqa: BLE001 - the message is what the test checks
            found["dying_error"] = f"{type(e).__name__}: {e}"
        found["dying_seconds"] = time.monotonic() - started
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1])
