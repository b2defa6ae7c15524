"""Records and run files are read through their schema: a corrupt one, or one written by a newer
stepgraph, is reported by name (verify goes on with the other steps, status and report exit 2)
and never rewritten."""

from __future__ import annotations

import json
from pathlib import Path

from .toy import run_main


def _record(step_dir: Path) -> Path:
    return step_dir / ".executor" / "record.json"


def test_verify_reports_a_corrupt_and_a_newer_record_and_goes_on(ran_toy):
    steps = sorted(p for p in Path(ran_toy.prefix, "toy").iterdir() if (p / ".executor").is_dir())
    assert len(steps) == 4
    truncated, newer = _record(steps[0]), _record(steps[1])
    truncated.write_bytes(truncated.read_bytes()[:40])
    document = json.loads(newer.read_bytes())
    newer.write_text(json.dumps({**document, "schema": 99}))
    before = {p: p.read_bytes() for p in (truncated, newer)}

    code, out = run_main("verify", ran_toy.prefix)
    assert code == 1, out
    assert "2 step(s) verified, 2 problem(s)" in out, out
    assert f"{truncated}: corrupt record" in out and f"{newer}: record schema 99 is newer" in out, out
    assert "Traceback" not in out

    code, out = run_main("status", str(steps[0]))
    assert code == 2 and f"record      unreadable: {truncated}: corrupt record" in out, out
    code, out = run_main("status", str(steps[1]))
    assert code == 2 and "upgrade stepgraph" in out, out
    assert {p: p.read_bytes() for p in before} == before  # left exactly as found


def test_a_run_file_from_a_newer_stepgraph_is_named_not_misread(ran_toy):
    [run_file] = Path(ran_toy.prefix, "runs").glob("*.json")
    document = json.loads(run_file.read_bytes())
    run_file.write_text(json.dumps({**document, "schema": 99}))
    before = run_file.read_bytes()

    code, out = run_main("report", "--prefix", ran_toy.prefix)
    assert code == 2 and f"{run_file}: run file schema 99 is newer" in out and "Traceback" not in out, out
    code, out = run_main("runs", "--prefix", ran_toy.prefix)
    assert code == 0 and "unreadable run file" in out and "schema 99" in out, out

    run_file.write_text('{"schema": 1, "run_id": "x"}')  # no steps: corrupt, whatever wrote it
    code, out = run_main("report", "--prefix", ran_toy.prefix)
    assert code == 2 and "corrupt run file: no steps field" in out, out
    run_file.write_bytes(before)
