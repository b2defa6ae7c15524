"""Benchmark: bytes each device communicates per MoE layer, all-gather vs all-to-all dispatch.

    uv run python scripts/bench/bench_moe_dispatch.py            # 8 fake CPU devices
    uv run python scripts/bench/bench_moe_dispatch.py --json out.json

For one expert-parallel MoE layer (forward + backward, the training step's traffic), it compiles
both schemes on 8 devices and reads the collectives out of the compiled HLO: for each
all-gather / reduce-scatter / all-to-all, a device moves (n-1)/n of the full buffer. Next to
that it prints the closed form `steps.train.sharding.dispatch_bytes_per_layer` (forward only,
x2 for the backward). Routing ids and gates (all-gathered or exchanged too) are included in the
HLO figure, which is why it is a little above the formula.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from steps.train.sharding import (dispatch_bytes_per_layer, expert_parallel_all_to_all_fn,  # noqa: E402
                                  expert_parallel_fn, make_mesh)

COLLECTIVE = re.compile(r"^\s*%\S+ = (.*?) (all-gather|reduce-scatter|all-to-all|all-reduce)\(", re.M)
SHAPE = re.compile(r"(\w+)\[([\d,]*)\]")
BYTES = {"f32": 4, "s32": 4, "bf16": 2, "f16": 2, "s64": 8, "u32": 4, "pred": 1}


def collective_bytes(hlo: str, n: int) -> dict:
    """Bytes one device sends, per collective kind, from a compiled module's text."""
    out: dict[str, int] = {}
    for result, kind in COLLECTIVE.findall(hlo):
        # the result type may be a tuple (all-to-all on CPU is one buffer per peer)
        size = sum(math.prod(int(d) for d in dims.split(",") if d) * BYTES.get(dtype, 4)
                   for dtype, dims in SHAPE.findall(result))
        if kind == "reduce-scatter":
            sent = size * (n - 1)            # the result is one shard; the device sent n-1 of them
        elif kind == "all-reduce":
            sent = 2 * size * (n - 1) // n   # ring all-reduce
        else:                                # all-gather result / all-to-all buffers
            sent = size * (n - 1) // n
        out[kind] = out.get(kind, 0) + sent
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens-per-device", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--d-expert", type=int, default=256)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--capacity-factor", type=float, default=1.25)
    parser.add_argument("--json")
    args = parser.parse_args()
    n = len(jax.devices())
    mesh = make_mesh(n, n)   # experts over every device
    t, d, f, e, k = args.tokens_per_device * n, args.d_model, args.d_expert, args.experts, args.top_k
    shapes = ({"w_gate": jax.ShapeDtypeStruct((e, d, f), jnp.float32), "w_up": jax.ShapeDtypeStruct((e, d, f), jnp.float32),
               "w_down": jax.ShapeDtypeStruct((e, f, d), jnp.float32)},
              jax.ShapeDtypeStruct((t, d), jnp.float32), jax.ShapeDtypeStruct((t, k), jnp.int32),
              jax.ShapeDtypeStruct((t, k), jnp.float32))
    schemes = {"all_gather": (expert_parallel_fn(mesh), None),
               "all_to_all (dropless)": (expert_parallel_all_to_all_fn(mesh, None), None),
               f"all_to_all (capacity {args.capacity_factor})":
                   (expert_parallel_all_to_all_fn(mesh, args.capacity_factor), args.capacity_factor)}
    report = {"devices": n, "tokens_per_device": args.tokens_per_device, "d_model": d, "experts": e, "top_k": k,
              "dtype": "float32", "schemes": {}}
    print(f"one MoE layer, fwd+bwd, {n} devices, {args.tokens_per_device} tokens/device, d_model {d}, "
          f"{e} experts top-{k}, float32; MiB sent per device:")
    for name, (fn, factor) in schemes.items():
        # value and grads (as in training) with a non-constant cotangent, so no collective is dead code
        loss = lambda w, x, i, g, c, fn=fn: jnp.sum(fn(w, x, i, g) * c)  # noqa: E731
        hlo = jax.jit(jax.value_and_grad(loss, (0, 1, 3))).lower(*shapes, shapes[1]).compile().as_text()
        measured = collective_bytes(hlo, n)
        scheme = "all_gather" if name == "all_gather" else "all_to_all"
        formula = 2 * dispatch_bytes_per_layer(scheme, args.tokens_per_device, k, d, n, factor)
        report["schemes"][name] = {"hlo_bytes": sum(measured.values()), "by_collective": measured,
                                   "formula_bytes": formula}
        print(f"  {name:<28} HLO {sum(measured.values()) / 2**20:8.2f}   formula {formula / 2**20:8.2f}   "
              + ", ".join(f"{kind} {b / 2**20:.2f}" for kind, b in sorted(measured.items())))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
