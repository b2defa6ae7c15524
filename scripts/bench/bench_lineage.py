"""Lineage and taint planning at scale: a prefix of N step outputs (statuses and records written
directly through the store, as runs write them), then `lineage --down` from the root, `lineage --up`
from a leaf, and the taint listing a plan makes.

    uv run python scripts/bench/bench_lineage.py                 # 10,000 steps on local disk
    uv run python scripts/bench/bench_lineage.py --steps 2000 --s3   # on the moto S3 emulator
    uv run python scripts/bench/bench_lineage.py --gcs                # on fake-gcs-server

Each output is committed as a run commits it: its status, then its lineage markers handed to a
run's marker writer (executor/engine/run/mark_writer.py, which writes them on threads of its own and
is drained before the prefix is walked), so the first `lineage --down` lists them and reads nothing.
The time to write the prefix is reported as the commits' time (records and statuses, markers handed
off) and the drain's (the markers still in flight when the commits are done).
`--without-markers` writes the prefix as an executor of before markers did: the first walk then finds
no edges index (executor/tools/lineage_index.py) and reads every status and record, then writes it;
the second lists and reads the index alone.

    uv run python scripts/bench/bench_lineage.py --without-markers   # the edges index's first walk

The graph: `--width` independent chains of N/width steps each, all reading one root. Reports the
listings and reads each walk made (counted by the walk itself) and its wall time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from executor.core.record import State, Status, record_key, status_key  # noqa: E402
from executor.engine.run.mark_writer import MarkWriter  # noqa: E402
from executor.engine.prefix.prefix_view import PrefixView  # noqa: E402
from executor.engine.store import open_store  # noqa: E402
from executor.tools.lineage import lineage_down, lineage_up  # noqa: E402
from executor.tools.taint import read_taints  # noqa: E402


class _Say:
    def warning(self, text: str) -> None:
        print(text)


def _write(store, n: int, width: int, markers: bool) -> tuple[str, str, str]:
    """N outputs: a root, then `width` chains reading it, each committed with its lineage markers unless
    `markers` is false. (root rel, a chain's first rel, one leaf's rel). Written on 32 threads."""
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]
    rels = [f"bench/s{i}-{d[:12]}" for i, d in enumerate(digests)]

    def one(i: int) -> None:
        parent = None if i == 0 else (0 if i <= width else i - width)
        deps = [] if parent is None else [{"step_id": rels[parent], "digest": digests[parent], "blocking": True}]
        record = {"schema": 1, "step_id": rels[i], "digest": digests[i], "name": "bench", "identity": {},
                  "dependencies": deps, "manifest": []}
        store.create_if_absent(record_key(rels[i]), json.dumps(record).encode())
        status = Status(State.SUCCESS, digests[i], rels[i], seq=1, attempt=1, owner=None, written_at=0.0)
        generation = store.create_if_absent(status_key(rels[i]), status.to_bytes())
        if markers:
            writer.submit(rels[i], status, generation, record)

    writer = MarkWriter(store, _Say())
    started = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(one, range(n)))
    committed = time.perf_counter()
    writer.drain()
    print(f"commits {committed - started:.1f}s, then the markers' drain {time.perf_counter() - committed:.1f}s")
    return rels[0], rels[1], rels[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--width", type=int, default=100)
    parser.add_argument("--without-markers", action="store_true",
                        help="commit no lineage markers (a prefix written before them)")
    parser.add_argument("--s3", action="store_true", help="on the moto S3 emulator (tests/emulators.py)")
    parser.add_argument("--gcs", action="store_true", help="on fake-gcs-server (tests/emulators.py)")
    args = parser.parse_args()
    with ExitStack() as stack:
        if args.s3:
            from tests.emulators import running_s3_emulator

            emulator = stack.enter_context(running_s3_emulator())
            prefix, options = emulator.fresh_prefix("lineage"), emulator.storage_options
        elif args.gcs:
            from tests.emulators import running_gcs_emulator

            emulator = stack.enter_context(running_gcs_emulator())
            prefix, options = emulator.fresh_prefix("lineage"), emulator.storage_options
        else:
            prefix, options = stack.enter_context(tempfile.TemporaryDirectory()) + "/prefix", None
        store = open_store(prefix, options)
        started = time.perf_counter()
        root, chain, leaf = _write(store, args.steps, args.width, not args.without_markers)
        print(f"{args.steps} outputs written under {prefix} in {time.perf_counter() - started:.1f}s")
        view = PrefixView.open(prefix, options)
        started = time.perf_counter()
        statuses = view.list_steps()
        listed = time.perf_counter() - started
        everything, markers = store.list_generations("", ""), store.list_generations("lineage/", "")
        print(f"the status listing (a plan's, and lineage's first): {len(statuses)} statuses in {listed:.2f}s; "
              f"{len(everything)} objects under the prefix ({-(-len(everything) // 1000)} pages of 1,000 where "
              f"the store cannot filter by suffix: S3), {len(markers)} of them lineage markers")
        first = "first walk, the edges index built" if args.without_markers else "first walk, markers listed"
        for label, walk in ((f"down from the root ({first})", lambda: lineage_down(view, root)),
                            ("down from the root again", lambda: lineage_down(view, root)),
                            ("down from a chain's first step", lambda: lineage_down(view, chain)),
                            ("up from a leaf", lambda: lineage_up(view, leaf, options))):
            started = time.perf_counter()
            found = walk()
            print(f"lineage {label}: {len(found.nodes)} outputs, {found.cost['listings']} listing(s), "
                  f"{found.cost['reads']} read(s), {time.perf_counter() - started:.2f}s")
        started = time.perf_counter()
        taints = read_taints(store)
        print(f"taint listing a plan makes (no taints): {len(taints)} found, "
              f"{(time.perf_counter() - started) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
