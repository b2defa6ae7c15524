"""Early cutoff (executor/engine/run/cutoff.py) away from a local disk and the inline runner: on memory://,
on a GCS bucket (fake-gcs-server) and an S3 bucket (moto), options only as --storage-options, and with
the Ray runner (the decision is made in the executor process, so one Ray run is enough)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from executor.cli import run
from executor.engine.prefix import location
from tests.buckets.conftest import clean_environment
from tests.cutoff.chain_experiment import chain
from tests.cutoff.test_cutoff import ran, subprocess_run
from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures)


@pytest.fixture
def sidefx(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "sidefx"
    path.mkdir()
    monkeypatch.setenv("CUT_SIDEFX", str(path))
    return path


def new_statuses(prefix: str, options: dict | None = None) -> dict[str, dict]:
    """Each step's latest status (by name), read through the coordination store (memory:// keeps them there)."""
    store = location.open_location(prefix, options)[0]
    found: dict[str, dict] = {}
    for key in store.list_generations("cut/", "/.executor/status.json"):
        status = json.loads(store.read(key).data)
        name = status["step_id"].rsplit("-", 1)[0]
        if name not in found or status["written_at"] > found[name]["written_at"]:
            found[name] = status
    return found


def test_cutoff_on_memory(sidefx, capsys):
    prefix = f"memory://cutoff-{os.getpid()}-{id(sidefx)}"
    argv = ["--prefix", prefix, "--runner", "inline"]
    assert run(chain(), "cut", argv=argv, environ={}) == 0
    before = new_statuses(prefix)
    ran(sidefx)
    assert run(chain(write_version="2"), "cut", argv=argv, environ={}) == 0
    assert ran(sidefx) == {"write": 1}
    after = new_statuses(prefix)
    assert after["cut/upper"]["alias_of"]["step_id"] == before["cut/upper"]["step_id"]
    assert after["cut/frame"]["alias_of"]["step_id"] == before["cut/frame"]["step_id"]
    assert run(chain(write_version="2"), "cut", argv=argv, environ={}) == 0 and ran(sidefx) == {}
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_cutoff_on_a_bucket_with_two_racing_runners(scheme, request, tmp_path, monkeypatch):
    """fake-gcs-server (generation preconditions) and moto S3 (If-Match / If-None-Match): the same race.
    The first run is the command line in this process; the racers are two processes, and cut/write
    holds its lease until the other racer says it waits on it (CUT_WRITE_GATE): the race is certain,
    and nobody sleeps a guessed 3 s for it (issue 46)."""
    emulator = request.getfixturevalue("gcs_emulator" if scheme == "gs" else "s3_emulator")
    sidefx = tmp_path / "sidefx"
    sidefx.mkdir()
    monkeypatch.setenv("CUT_SIDEFX", str(sidefx))
    prefix, options = emulator.fresh_prefix("cutoff"), dict(emulator.storage_options)
    args = ("--runner", "inline", "--storage-options", json.dumps(options))
    assert run(chain(), "cut", argv=["--prefix", prefix, *args], environ=clean_environment()) == 0
    before = new_statuses(prefix, options)
    ran(sidefx)
    gate = tmp_path / "go"
    racers = [subprocess_run(prefix, sidefx, *args, env=clean_environment(), CUT_TEXT="HELLO world",
                             CUT_WRITE_GATE=str(gate)) for _ in range(2)]
    outs, readers = zip(*(_collect(r) for r in racers))
    deadline = time.monotonic() + 120
    while not any("cut/write: running elsewhere" in "".join(o) for o in outs):
        assert time.monotonic() < deadline and all(r.poll() is None for r in racers), outs
        time.sleep(0.05)
    gate.touch()
    assert [r.wait(timeout=240) for r in racers] == [0, 0], outs
    for reader in readers:
        reader.join(timeout=30)
    outs = ["".join(o) for o in outs]
    assert ran(sidefx) == {"write": 1, "upper": 1}, outs  # upper's output is byte-identical: frame is cut off
    after = new_statuses(prefix, options)
    assert after["cut/frame"]["alias_of"]["step_id"] == before["cut/frame"]["step_id"]
    assert after["cut/frame"]["seq"] == 1  # one lease, one fenced commit
    assert sum("✂ cut/frame not run" in o for o in outs) == 1, outs
    fs = location.open_filesystem(prefix, options)
    target = after["cut/frame"]["alias_of"]["output_rel"]
    assert fs.cat_file(f"{prefix}/{target}/text.txt") == b"[HELLO WORLD]"


def _collect(process) -> tuple[list[str], threading.Thread]:
    """The process's output lines as they come, in a list read while it runs, and the thread reading
    its pipe (joined once the process ended: then the list holds every line)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    return lines, reader


def test_cutoff_with_the_ray_runner(tmp_path, sidefx):
    prefix = str(tmp_path / "prefix")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess_run(prefix, sidefx, "--runner", "inline", env=env)
    assert first.wait(timeout=120) == 0, first.stdout.read()
    ran(sidefx)
    bumped = subprocess_run(prefix, sidefx, "--runner", "ray", env=env, CUT_WRITE_VERSION="2")
    out = bumped.communicate(timeout=300)[0]
    assert bumped.returncode == 0, out
    assert "starting Ray" in out, out
    assert ran(sidefx) == {"write": 1}, out
    assert "✂ cut/upper not run" in out and "✂ cut/frame not run" in out, out


def test_the_served_step_page_says_why_a_step_was_cut_off(tmp_path, sidefx):
    """`stepgraph serve` (the live view in a browser): a cut-off step's page names the evidence."""
    from urllib.parse import quote

    from tests.serve import server

    prefix = str(tmp_path / "prefix")
    for version in (None, "2"):  # the runs: the command line in this process (the server is a process)
        assert run(chain(write_version=version), "cut", argv=["--prefix", prefix, "--runner", "inline"],
                   environ={}) == 0
    cut = next(s for s in new_statuses(prefix).values() if s["step_id"].startswith("cut/frame"))
    running = server.start(prefix)
    try:
        code, _, body = running.get(f"/step/{quote(cut['step_id'])}")
    finally:
        running.stop()
    assert code == 200
    page = body.decode()
    assert '<td id="cut-off">cut off: cut/upper&#39;s output unchanged (manifest sha256' in page, page[-3000:]
