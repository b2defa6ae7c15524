"""Data steps at scale on a simulated Ray cluster: exact/fuzzy dedup and tokenize at 1x, 4x, 16x.

    uv run python scripts/bench/bench_data_scale.py [--base-docs 250000] [--sizes 1,4,16]
        [--nodes 3] [--storage local,s3] [--steps exact,fuzzy,tokenize] [--scaling]

A cluster of `--nodes` one-CPU nodes is started on this machine (ray.cluster_utils.Cluster); each
measured step runs in a fresh driver process joined to it (as an experiment would) and fans shards
out to the nodes. Per step and size it prints: wall time, documents/s, peak RSS of that driver
process and of the largest Ray worker (sampled every 0.2 s), bytes shuffled, the CPU seconds of
each node's workers, how many nodes ran tasks of each dedup stage, and the kept set's fingerprint
(sha256 of the kept ids in order). On the 1x corpus an in-process run (a fresh process, no Ray) is
the reference the cluster's fingerprint must equal. `--scaling` times exact dedup on the 4x corpus
with one node and then with two. `--storage s3` runs against moto's S3 emulator started by this process.
Print `uptime` next to the figures: on a shared machine they vary with the load.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))   # the project, and tests.emulators / tests.steps.cluster_driver
SCRATCH = REPO / "scratch" / "bench" / "scale"


class PeakRss:
    """Peak RSS of the step's driver process and of the largest `ray::` worker process, and the CPU
    seconds the workers of each node (raylet) spent, sampled in a thread (no dashboard needed)."""

    def __init__(self, driver_pid: int, interval: float = 0.2):
        import psutil

        self.psutil, self.interval, self.driver_pid = psutil, interval, driver_pid
        self.driver = self.worker = 0
        self._cpu: dict[int, tuple[int, float]] = {}   # worker pid -> (raylet pid, cpu seconds in this step)
        self._baseline: dict[int, float] = {}          # cpu seconds a worker had spent before this step
        self._started = False
        self._raylets: dict[int, bool] = {}            # pid -> is a raylet of this script's cluster
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        driver = self.psutil.Process(self.driver_pid)
        while not self._stop.is_set():   # the first pass records the workers already there
            try:
                self.driver = max(self.driver, driver.memory_info().rss)
            except self.psutil.Error:
                pass   # the driver has just exited
            for p in self.psutil.process_iter(["name", "memory_info", "cpu_times", "ppid"]):
                try:
                    if (p.info["name"] or "").startswith("ray::") and p.info["memory_info"] and self._ours(p):
                        self.worker = max(self.worker, p.info["memory_info"].rss)
                        cpu = p.info["cpu_times"].user + p.info["cpu_times"].system
                        self._baseline.setdefault(p.pid, cpu if not self._started else 0.0)
                        self._cpu[p.pid] = (p.info["ppid"], cpu - self._baseline[p.pid])
                except self.psutil.Error:
                    pass
            self._started = True
            self._stop.wait(self.interval)

    def _ours(self, worker) -> bool:
        """A task worker of this script's cluster: its raylet was started by this process (other
        Ray clusters on the machine, e.g. a test suite's, are not counted)."""
        raylet = self._raylets.get(worker.info["ppid"])
        if raylet is None:
            try:
                parent = self.psutil.Process(worker.info["ppid"])
                raylet = self._raylets[parent.pid] = parent.name() == "raylet" and parent.ppid() == os.getpid()
            except self.psutil.Error:
                return False
        return raylet

    def cpu_by_node(self) -> list[float]:
        """Worker CPU seconds per raylet (one raylet per simulated node), largest first."""
        nodes: dict[int, float] = {}
        for raylet, cpu in self._cpu.values():
            nodes[raylet] = nodes.get(raylet, 0.0) + cpu
        return sorted((round(v, 1) for v in nodes.values()), reverse=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def corpus(base_docs: int, size: int, root: str) -> tuple[str, int]:
    """The size-x corpus: short generated documents (with exact and near copies) in 8*size files."""
    from steps.data.synthetic import generate_corpus
    from steps.documents import list_document_files, write_documents

    directory = f"{root}/corpus-{base_docs}x{size}"
    marker = Path(f"{directory}.done") if "://" not in root else None
    if marker is None or not marker.exists():
        docs = generate_corpus(seed=size, num_originals=int(base_docs * size * 0.88), mean_words=30,
                               exact_fraction=0.06, near_fraction=0.06, boilerplate_sites=8, pages_per_site=10).docs
        files = 8 * size
        per = -(-len(docs) // files)
        for k in range(files):
            write_documents(f"{directory}/part-{k:05d}.jsonl.zst", docs[k * per:(k + 1) * per])
        if marker is not None:
            marker.write_text(str(len(docs)))
    count = int(marker.read_text()) if marker is not None else None
    if count is None:
        from steps.documents import count_records
        count = sum(count_records(p) for p in list_document_files(directory))
    return directory, count


def corpus_elsewhere(base_docs: int, size: int, root: str, storage_options: dict | None) -> tuple[str, int]:
    """corpus(), generated in a child process: the driver's peak RSS must be the step's, not that
    of millions of generated documents this process would otherwise have held."""
    import json

    done = subprocess.run([sys.executable, __file__, "make-corpus", str(base_docs), str(size), root,
                           json.dumps(storage_options or {})], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"generating the {size}x corpus failed:\n{done.stderr[-3000:]}")
    directory, count = done.stdout.split()[-2:]
    return directory, int(count)


def step_storage(s3_options: dict | None):
    """A block whose s3:// paths open with these options, as a runner gives a step its storage
    (this process's driver stands in for the step)."""
    from executor.core.locations import Storage
    from executor.engine.prefix import location

    return location.using(Storage({"s3://": s3_options} if s3_options else None))


def make_corpus(argv: list[str]) -> None:
    import json

    base_docs, size, root, options = int(argv[0]), int(argv[1]), argv[2], json.loads(argv[3])
    with step_storage(options):
        directory, count = corpus(base_docs, size, root)
    print(directory, count)


def fingerprint(output: str) -> str:
    from steps.documents import list_document_files, read_documents

    digest = hashlib.sha256()
    for path in list_document_files(f"{output}/docs"):
        for doc in read_documents(path):
            digest.update(doc["id"].encode() + b"\n")
    return digest.hexdigest()[:16]


def run_step(step: str, input_dir: str, output: str) -> dict:
    from steps.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup, fuzzy_dedup
    from steps.tokenize import TokenizeConfig, tokenize

    if step == "exact":
        return exact_dedup(ExactDedupConfig(input_dir, output, partition_bytes=16 << 20))
    if step == "fuzzy":
        return fuzzy_dedup(FuzzyDedupConfig(input_dir, output, partition_bytes=16 << 20))
    return tokenize(TokenizeConfig(input_dir, output, vocab_size=2048, max_tokenizer_training_bytes=5_000_000,
                                   num_output_shards=8))


def measure(step: str, input_dir: str, docs: int, output: str, label: str, address: str = "",
            storage_options: dict | None = None) -> dict:
    """Run the step in a fresh driver process (as a user's experiment would), joined to the
    cluster at `address` (none: in-process, no Ray), and sample that process and the workers."""
    import json

    from executor.engine.prefix import location

    fs, path = location.url_to_fs(output)
    if fs.exists(path):  # a fresh run each time, not a resumed one
        fs.rm(path, recursive=True)
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, __file__, "run-step", step, input_dir, output, address,
                              json.dumps(storage_options or {})], stdout=subprocess.PIPE, text=True)
    with PeakRss(child.pid) as rss:
        stdout, _ = child.communicate()
    wall = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"{step} on {input_dir} failed (exit {child.returncode})")
    result = json.loads(stdout.rsplit("RESULT ", 1)[1])
    row = {"label": label, "wall_s": round(wall, 1), "docs_per_s": round(docs / wall),
           "driver_rss_mb": rss.driver >> 20, "worker_rss_mb": rss.worker >> 20,
           "shuffled_mb": round(result.get("bytes_shuffled", 0) / 1e6, 1), "worker_cpu_s_by_node": rss.cpu_by_node(),
           "fingerprint": fingerprint(output) if step != "tokenize" else f"{result['train_tokens']} tokens"}
    if "nodes_per_stage" in result:  # dedup: how many nodes ran tasks of each stage
        row["nodes_per_stage"] = ",".join(f"{stage}:{n}" for stage, n in result["nodes_per_stage"].items())
    print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return row


def run_step_here(argv: list[str]) -> None:
    """The driver process of one measured step."""
    import json

    step, input_dir, output, address, options = argv[0], argv[1], argv[2], argv[3], json.loads(argv[4])
    if address:
        import ray

        from tests.steps.cluster_driver import warm_every_node

        ray.init(address=address, log_to_driver=False)
        warm_every_node()  # tasks spread by the work, not by which node's worker started first
    with step_storage(options):
        result = run_step(step, input_dir, output)
    print("RESULT " + json.dumps(result, default=str), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-docs", type=int, default=250_000)
    parser.add_argument("--sizes", default="1,4,16")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--storage", default="local")
    parser.add_argument("--steps", default="exact,fuzzy,tokenize")
    parser.add_argument("--scaling", action="store_true")
    args = parser.parse_args()
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    from executor.engine.runner.ray_env import prepare_loopback_environment

    prepare_loopback_environment()
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    os.environ["PYTHONPATH"] = f"{REPO}:{os.environ.get('PYTHONPATH', '')}"
    SCRATCH.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    steps = args.steps.split(",")
    roots = {"local": str(SCRATCH)}
    options: dict[str, dict] = {"local": {}}
    emulator = None
    if "s3" in args.storage.split(","):
        from tests.emulators import running_s3_emulator

        emulator = running_s3_emulator()
        s3 = emulator.__enter__()
        holding = step_storage(s3.storage_options)  # held while main runs
        holding.__enter__()
        roots["s3"] = f"s3://{s3.bucket}/scale"
        options["s3"] = s3.storage_options

    references = {}
    base_dir, base_docs = corpus_elsewhere(args.base_docs, 1, roots["local"], None)
    print(f"reference (one process, no Ray) on the 1x corpus: {base_docs} docs", flush=True)
    for step in steps:
        if step != "tokenize":
            references[step] = measure(step, base_dir, base_docs, f"{SCRATCH}/ref-{step}", "in-process")["fingerprint"]

    from tests.steps.cluster_driver import start_cluster  # the tests' cluster helper

    import ray

    cluster, workers = start_cluster(args.nodes)
    try:
        for storage in args.storage.split(","):
            for size in sizes:
                input_dir, docs = corpus_elsewhere(args.base_docs, size, roots[storage], options[storage])
                for step in steps:
                    print(f"[{storage}] {step} at {size}x ({docs} docs) on {args.nodes} nodes", flush=True)
                    row = measure(step, input_dir, docs, f"{roots[storage]}/out-{step}-{size}x", f"{size}x",
                                  cluster.address, options[storage])
                    if size == 1 and step in references:
                        print(f"  equals the in-process reference: {row['fingerprint'] == references[step]}")
        if args.scaling:
            ray.shutdown()
            cluster.shutdown()
            input_dir, docs = corpus_elsewhere(args.base_docs, 4, roots["local"], None)
            for nodes in (1, 2):
                cluster, workers = start_cluster(nodes)
                print(f"[scaling] exact at 4x on {nodes} one-CPU node(s)", flush=True)
                measure("exact", input_dir, docs, f"{SCRATCH}/scaling-{nodes}", f"{nodes} node(s)", cluster.address)
                ray.shutdown()
                cluster.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
        if emulator is not None:
            emulator.__exit__(None, None, None)


if __name__ == "__main__":
    if sys.argv[1:2] == ["make-corpus"]:
        make_corpus(sys.argv[2:])
    elif sys.argv[1:2] == ["run-step"]:
        run_step_here(sys.argv[2:])
    else:
        main()
