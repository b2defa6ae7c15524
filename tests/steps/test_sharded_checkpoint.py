"""The sharded checkpoint layout (what a multi-host run writes): every process writes only its own
pieces, process 0 commits only once every process wrote this save's pieces (leftovers of another
attempt do not count), a checkpoint written from 8 devices restores onto 4 or onto the host, and a
missing, short or altered shard file is never restored. On local disk, GCS and S3 emulators.

Two host processes are played by two threads of one process with 8 fake CPU devices: the pieces
of the 8-device state are dealt out between them, as two real hosts would hold them (the real
two-process run is tests/runner/test_multihost_train.py)."""

from __future__ import annotations

import json

import pytest

from tests.steps.test_train import run_python

try:
    from emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures)
except ImportError:
    from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401

SCENARIO = """
import json, sys, threading, time
import jax, numpy as np
from executor.engine.prefix import location
from steps.train import checkpoint, sharded_checkpoint as sc
from steps.train.sharding import make_mesh, state_shardings

out, options = sys.argv[1], json.loads(sys.argv[2])
import contextlib, contextvars
from executor.core.locations import Storage
step_storage = contextlib.ExitStack()  # held to the end: as a runner does around a step
step_storage.enter_context(location.using(Storage({out: options} if options else None)))
fs, root = location.url_to_fs(out)
state = {"params": {"w": np.arange(64 * 6, dtype=np.float32).reshape(64, 6), "b": np.arange(16, dtype=np.int32)},
         "odd": np.arange(7, dtype=np.float32), "step": np.int32(3)}
on8 = jax.device_put(state, state_shardings(state, make_mesh(8), False, fsdp=True))
every = sc.host_pieces(on8, checkpoint.leaf_path)
assert len(every.pieces) == 8 + 8 + 1 + 1, len(every.pieces)   # w, b split 8 ways; odd, step: one replica
host = [sc.HostPieces(p, 2, every.leaves, every.pieces[p::2]) for p in (0, 1)]
result = {}

# a leftover of another attempt at this step: process 1's shards under another token
checkpoint.save_sharded(out, 4, host[1], token="old")
saving = threading.Thread(target=contextvars.copy_context().run,  # the thread opens paths with this storage
                          args=(checkpoint.save_sharded, out, 4, host[0], "new"))
saving.start()
time.sleep(1.5)
result["committed_with_a_leftover"] = checkpoint.committed_steps(out)
checkpoint.save_sharded(out, 4, host[1], token="new")
saving.join(60)
result["committed"] = checkpoint.committed_steps(out)
result["files"] = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{root}/checkpoints/step-000004/shards", detail=False))

template = jax.eval_shape(lambda: state)
on4 = checkpoint.restore(out, 4, template, shardings=state_shardings(state, make_mesh(4), False, fsdp=True))
result["on4_equal"] = all(np.array_equal(np.asarray(a), b) and a.dtype == b.dtype
                          for a, b in zip(jax.tree.leaves(on4), jax.tree.leaves(state)))
result["on4_devices"] = sorted({len(leaf.sharding.device_set) for leaf in jax.tree.leaves(on4)})
result["w_on4_shard_rows"] = on4["params"]["w"].addressable_shards[0].data.shape[0]
host_copy = checkpoint.restore(out, 4, template)
result["host_equal"] = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(host_copy), jax.tree.leaves(state)))

# a process that never writes: the commit gives up, naming it, and nothing is committed
try:
    checkpoint.sharded_checkpoint.write(fs, f"{root}/checkpoints/step-000008", 8, host[0], "lonely", 2, wait_s=0.5)
except TimeoutError as e:
    result["timeout"] = str(e)
result["after_timeout"] = checkpoint.committed_steps(out)

# an altered shard (same size) is refused on reading; a short one makes the checkpoint torn
shard = f"{root}/checkpoints/step-000004/shards/process-00001.npz"
good = fs.cat_file(shard)
fs.pipe_file(shard, good[:-8] + bytes(8))
try:
    checkpoint.restore(out, 4, template)
except ValueError as e:
    result["altered"] = str(e)
fs.pipe_file(shard, good[:-8])
fs.invalidate_cache()
messages = []
result["latest_with_short_shard"] = checkpoint.latest_complete(out, log=messages.append)
result["torn_message"] = messages
print("RESULT", json.dumps(result))
"""


@pytest.mark.parametrize("where", ["local", "gcs_emulator", "s3_emulator"])
def test_sharded_checkpoints_commit_by_token_restore_onto_another_mesh_and_refuse_damage(where, request, tmp_path):
    if where == "local":
        out, options = str(tmp_path / "run"), {}
    else:
        emu = request.getfixturevalue(where)
        out, options = emu.fresh_prefix("sharded"), emu.storage_options
    proc = run_python(f"import sys; sys.argv = ['x', {out!r}, {json.dumps(options)!r}]\n" + SCENARIO,
                      {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert result["committed_with_a_leftover"] == [], "committed while process 1's shards were another attempt's"
    assert result["committed"] == [4]
    assert result["files"] == ["process-00000.json", "process-00000.npz", "process-00001.json", "process-00001.npz"]
    assert result["on4_equal"] and result["host_equal"]
    assert result["on4_devices"] == [4] and result["w_on4_shard_rows"] == 16   # 64 rows over 4 devices
    assert "processes [1] did not write their shards" in result["timeout"]
    assert result["after_timeout"] == [4]
    assert "process-00001.npz does not match the checksum" in result["altered"]
    assert result["latest_with_short_shard"] is None
    assert any("process-00001.npz has" in m for m in result["torn_message"]), result["torn_message"]
