"""What a cluster can ever run: plan-time checks of steps' resource requests. Pure (no Ray).

A request that no node can ever satisfy (or a multi-host step needing more nodes of a shape
than exist) is an error before anything runs, naming the step, the request and what the
cluster has — never a task that waits forever for resources that do not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from executor.core.step import Resources

HIDDEN = ("object_store_memory", "node:", "accelerator_type:", "bundle_group")
MULTIHOST_PLACEMENT = "STRICT_SPREAD"  # each host of a multi-host step on its own node, in tests too


@dataclass(frozen=True)
class NodeShape:
    """One alive node: its id and the total amount of each resource it offers."""

    node_id: str
    address: str
    resources: Mapping[str, float]


def demand(r: Resources) -> dict[str, float]:
    """The Ray resources one host of a step asks for (the shape of one bundle)."""
    need: dict[str, float] = {"CPU": float(r.cpus), "GPU": float(r.gpus)}
    if r.memory_bytes:
        need["memory"] = float(r.memory_bytes)
    need.update({k: float(v) for k, v in r.custom.items()})
    return {k: v for k, v in need.items() if v}


def fits(need: Mapping[str, float], node: NodeShape) -> bool:
    return all(node.resources.get(k, 0.0) + 1e-9 >= v for k, v in need.items())


def _fmt(resources: Mapping[str, float]) -> str:
    def one(k: str, v: float) -> str:
        if k == "memory":
            return f"memory={v / 2**30:.1f}GiB"
        return f"{k}={v:g}"
    return "{" + ", ".join(one(k, v) for k, v in sorted(resources.items())
                           if not any(k.startswith(h) for h in HIDDEN)) + "}"


def describe_cluster(nodes: Sequence[NodeShape], limit: int = 6) -> str:
    if not nodes:
        return "the cluster has no alive node"
    lines = [f"{n.address} {_fmt(n.resources)}" for n in nodes[:limit]]
    more = f"; and {len(nodes) - limit} more" if len(nodes) > limit else ""
    return f"the cluster has {len(nodes)} node(s): " + "; ".join(lines) + more


def infeasible(name: str, r: Resources, nodes: Sequence[NodeShape]) -> str | None:
    """Why this step can never be scheduled on these nodes, or None when it can."""
    need = demand(r)
    hosts = max(1, int(r.hosts))
    if hosts == 1:
        if any(fits(need, n) for n in nodes):
            return None
        return (f"step {name!r} asks for {_fmt(need)} but no node can ever provide that; "
                f"{describe_cluster(nodes)}. Lower the step's Resources or use a bigger cluster.")
    spread = sum(fits(need, n) for n in nodes)
    if spread >= hosts:
        return None
    return (f"step {name!r} asks for {hosts} hosts of {_fmt(need)} each (one per node), but only {spread} "
            f"node(s) have that shape; {describe_cluster(nodes)}.")


def check_steps(steps: Iterable[tuple[str, Resources]], nodes: Sequence[NodeShape], *,
                prefix_is_local: bool, shared_filesystem: bool = False) -> list[str]:
    """Every reason the given steps cannot run on this cluster (empty when all can)."""
    problems: list[str] = []
    if prefix_is_local and len(nodes) > 1 and not shared_filesystem:
        problems.append(
            f"a local prefix cannot be used on a multi-node cluster ({len(nodes)} nodes): other nodes "
            f"would write to their own disks. Use --prefix gs://... or s3://..., or, if the path is a "
            f"filesystem shared by every node (NFS), set EXECUTOR_SHARED_FILESYSTEM=1.")
    for name, r in steps:
        reason = infeasible(name, r, nodes)
        if reason:
            problems.append(reason)
    return problems
