"""A paused holder never writes into an output another runner committed (issue 12, item 2).

The zombie runs end/long (rewriting its part files every 0.1 s, tagged "zombie") and is paused
with SIGSTOP past its lease TTL; a second runner (tagged "taker": different bytes) takes the lease
over and commits. After SIGCONT, the zombie must neither commit nor write: the committed files
hold the taker's bytes and match the manifest, on local disk and on the S3 emulator. The inline
runner runs the step in a child process that stops itself when its runner goes silent.
"""

from __future__ import annotations

import signal
import time

from tests.endings.conftest import BOTH
from tests.endings.harness import TAKER_TTL, Driver, assert_clean, pid_alive, statuses, wait_for


@BOTH
def test_paused_holder_cannot_touch_the_committed_output(backend, sidefx, tmp_path):
    zombie = Driver(backend, sidefx, tmp_path / "zombie.log", "--only", "end/long", long="sleep:12", tag="zombie")
    wait_for(lambda: backend.fs().glob(f"{backend.prefix}/end/long-*/part-2"), 60, "the zombie's step to write", zombie)
    (step_pid,) = [int(p.name.rsplit("-", 1)[1]) for p in sidefx.iterdir() if p.name.startswith("start-long-")]
    zombie.signal(signal.SIGSTOP)
    try:
        taker = Driver(backend, sidefx, tmp_path / "taker.log", "--only", "end/long", tag="taker", ttl=TAKER_TTL)
        assert taker.wait() == 0, taker.output()[-3000:]
        assert "took over a stale lease" in taker.output()
        fs = backend.fs()
        committed = {p: fs.cat_file(p) for p in fs.glob(f"{backend.prefix}/end/long-*/part-*")}
        assert set(committed.values()) == {b"taker:long:final"}
    finally:
        zombie.signal(signal.SIGCONT)
    assert zombie.wait() == 0, zombie.output()[-3000:]
    assert "lease lost" in zombie.output() and "completed by another runner" in zombie.output()
    wait_for(lambda: not pid_alive(step_pid), 10, "the zombie's step process to be gone")
    time.sleep(0.5)  # what a surviving late writer would need to land one more rewrite (every 0.1 s)
    fs = backend.fs()
    assert {p: fs.cat_file(p) for p in fs.glob(f"{backend.prefix}/end/long-*/part-*")} == committed
    found = assert_clean(backend, taker, 0)
    assert found["long"]["owner"]["pid"] == taker.pid and found["long"]["attempt"] == 2
