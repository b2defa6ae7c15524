"""The Ray runner starts its OWN embedded cluster, even when this machine has another one.

A bare `ray.init()` joins whatever cluster `ray start` (or `ray.cluster_utils.Cluster`) last
recorded in `<ray temp dir>/ray_current_cluster`. A user's experiment must not land on such a
cluster by accident: only `--ray-address` / RAY_ADDRESS join one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from executor.core.record import State, parse_status

REPO = Path(__file__).resolve().parents[2]


def test_a_cluster_recorded_on_this_machine_is_not_joined_without_an_address(tmp_path):
    ray_tmp = Path(tempfile.mkdtemp(prefix="sgiso-", dir="/tmp"))  # short: Ray's unix socket paths
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")  # nothing listens there
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_TMPDIR=str(ray_tmp), PYTHONPATH=str(REPO))
        done = subprocess.run([sys.executable, str(REPO / "experiments" / "hello.py"), "--prefix", str(tmp_path),
                               "--runner", "ray"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting Ray" in done.stdout
    found = [parse_status(p.read_bytes(), str(p)) for p in tmp_path.glob("hello/*/.executor/status.json")]
    assert len(found) == 5 and {s.state for s in found} == {State.SUCCESS}
