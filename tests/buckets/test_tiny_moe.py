"""The quickstart on buckets: experiments/tiny_moe.py end to end (download, dedup, tokenize, train
with a checkpoint, eval, summary) on fake-gcs-server and on moto at once, on a joined Ray cluster
whose head was started with no credentials or endpoints in its environment (the session's head,
tests/conftest.py `ray_head`: a cluster start saved), so the storage options reach the workers
only inside each step's call; then a no-op re-run of each.

Each attempt's log must be uploaded to `<step>/.executor/logs/attempt-1.log` on both emulators
(issue 12, item 7), and the S3 secret must appear nowhere: not in an object, the console, or any
file of the Ray session (where Ray keeps task logs and events)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.buckets.conftest import REPO, assert_no_secret, clean_environment, make_bucket

TRAIN_STEPS = "2"
STEPS = ("raw/shakespeare", "dedup/shakespeare", "tokenized/shakespeare", "train/tiny_moe", "eval/tiny_moe",
         "summary/tiny_moe")


def start(bucket, head, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "experiments" / "tiny_moe.py"), "--prefix", bucket.prefix,
                             "--storage-options", bucket.options_json, "--train-steps", TRAIN_STEPS,
                             "--ray-address", head.address, *args],
                            cwd=REPO, env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


@pytest.mark.timeout(1200)  # two quickstarts with training; minutes on a loaded 2-core machine
def test_tiny_moe_end_to_end_on_gcs_and_s3_then_a_noop_rerun(gcs_emulator, s3_emulator, ray_head):
    buckets = [make_bucket(gcs_emulator, "moe"), make_bucket(s3_emulator, "moe")]
    runs = [start(b, ray_head) for b in buckets]  # both at once: the cluster has room, the suite saves minutes
    results = [finish(r) for r in runs]
    for bucket, (code, out, err) in zip(buckets, results):
        assert code == 0, f"{bucket.prefix}:\n{out[-4000:]}\n{err[-4000:]}"
        assert "6/6 step(s) succeeded, 6 ran here" in out, out
        objects = bucket.objects()
        summary = next(data for path, data in objects.items() if path.endswith("/summary.txt"))
        assert summary.startswith(f"tiny MoE after {TRAIN_STEPS} steps".encode()), summary
        assert any("/checkpoints/" in p and p.endswith("/COMMITTED") for p in objects), sorted(objects)
        for name in STEPS:
            logs = [p for p in objects if p.startswith(name + "-") and p.endswith("/.executor/logs/attempt-1.log")]
            assert len(logs) == 1, (name, sorted(objects))
            assert f"{name}-".encode() in objects[logs[0]]  # the header names the step
        summary_log = next(data for path, data in objects.items()
                           if path.startswith("summary/") and path.endswith("attempt-1.log"))
        assert b"bits/byte" in summary_log  # the step's own printed output, not only the header

    reruns = [finish(start(b, ray_head)) for b in buckets]
    for bucket, (code, out, err) in zip(buckets, reruns):
        assert code == 0 and "all 6 step(s) already succeeded; nothing to do" in out, out + err
        assert "joining Ray" not in out + err

    s3 = buckets[1]
    assert_no_secret(s3, *(text for result in results + reruns for text in result[1:]))
    for file in Path(ray_head.root).rglob("*"):
        if file.is_file() and not file.is_symlink():
            assert s3.secret.encode() not in file.read_bytes(), f"the secret leaked into {file}"
