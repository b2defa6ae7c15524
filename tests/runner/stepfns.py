"""Step functions and configs for the Ray runner tests (importable, so workers can load them)."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Probe:
    """A step that reports where it ran; `mode` chooses a misbehaviour."""

    output_path: str
    mode: str = "ok"  # ok | kill-once | raise | raise-once | sleep
    tag: str = ""
    sleep_s: float = 0.0


def probe(config: Probe) -> dict:
    import ray

    out = Path(config.output_path)
    calls = out / "calls.txt"
    with calls.open("a") as f:
        f.write(f"{os.getpid()}\n")
    print(f"probe {config.tag} running in pid {os.getpid()}", flush=True)
    os.system("echo from-a-subprocess")  # noqa: S605 - fd-level output must land in the log too
    if config.mode == "kill-once" and not (out / "killed-once").exists():
        (out / "killed-once").write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)
    if config.mode == "keyboard-interrupt":  # the step's own, not a Ctrl-C: its error (issue 12, item 10)
        raise KeyboardInterrupt(f"{config.tag} raised KeyboardInterrupt itself")
    if config.mode == "raise" or (config.mode == "raise-once" and len(calls.read_text().split()) == 1):
        raise ValueError(f"user error in {config.tag}")
    if config.mode == "sleep":
        (out / "started").write_text(str(os.getpid()))
        deadline = time.time() + config.sleep_s
        while time.time() < deadline:
            (out / "heartbeat").write_text(str(time.time()))
            time.sleep(0.2)
    context = ray.get_runtime_context()
    (out / "result.json").write_text(json.dumps({"tag": config.tag}))
    return {"pid": os.getpid(), "node_id": context.get_node_id(),
            "assigned": {k: v for k, v in context.get_assigned_resources().items()},
            "env": os.environ.get("STEPGRAPH_TEST_VAR"), "calls": len(calls.read_text().split())}


@dataclass(frozen=True)
class AllReduce:
    output_path: str
    hosts: int = 2


def all_reduce(config: AllReduce) -> dict:
    """Each process contributes (process_index + 1); psum over processes must give n(n+1)/2."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils

    from executor import current_node
    from executor.engine.worker import multihost
    me, n = jax.process_index(), jax.process_count()
    Path(config.output_path, f"host-{me}.json").write_text(json.dumps({"pid": os.getpid(), "me": me,
                                                                        "node": current_node()}))
    gathered = multihost_utils.process_allgather(jnp.array([me + 1.0]))
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("p",))
    spec = jax.sharding.PartitionSpec("p")
    local = jnp.full((jax.local_device_count(),), me + 1.0)
    global_array = multihost_utils.host_local_array_to_global_array(local, mesh, spec)
    total = jax.jit(lambda x: jnp.sum(x), out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))(global_array)
    return {"process_id": multihost.process_id(), "num_processes": n, "jax_process_count": n,
            "allgather": [float(v) for v in np.asarray(gathered).ravel()], "sum": float(total)}
