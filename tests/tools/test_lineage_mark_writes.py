"""A run's lineage markers (executor/engine/run/mark_writer.py) are written off the run loop, all of a
commit's at once, and drained before the run returns."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from executor import ExecutorStep, api, open_file, output_path_of, this_output_path
from executor.engine.events import StepFinished
from executor.engine.prefix.prefix_view import PrefixView
from executor.engine.store import open_store
from executor.engine.store.local import LocalStore
from executor.tools.lineage import lineage_down

from .names_steps import RawConfig, make_raw


@dataclass(frozen=True)
class JoinConfig:
    a: str
    b: str
    c: str
    output_path: str


def join(config: JoinConfig) -> None:
    texts = []
    for path in (config.a, config.b, config.c):
        with open_file(path, "r") as f:
            texts.append(f.read())
    with open_file(f"{config.output_path}/data.txt", "w") as f:
        f.write("+".join(texts))


class _Gate:
    """Holds every marker write until `at_once` are in flight together (or `wait_s` passed)."""

    def __init__(self, at_once: int, wait_s: float = 10.0):
        self.at_once, self.wait_s = at_once, wait_s
        self.cond = threading.Condition()
        self.in_flight = self.most = 0
        self.opened = False
        self.done: list[str] = []  # marker keys, in the order their writes ended

    def write(self, original, store, key, data):
        if not key.startswith("lineage/"):
            return original(store, key, data)
        with self.cond:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self.in_flight >= self.at_once:
                self.opened = True
                self.cond.notify_all()
            self.cond.wait_for(lambda: self.opened, timeout=self.wait_s)
        time.sleep(0.2)  # still writing when the run loop has nothing left to do
        try:
            return original(store, key, data)
        finally:
            with self.cond:
                self.in_flight -= 1
                self.done.append(key)


def test_a_commit_does_not_wait_for_its_lineage_markers_and_the_run_drains_them(tmp_path, monkeypatch):
    """Three roots and a step joining them: the join's three consumers/ markers and the roots' outputs/
    markers are in flight together, held until the last commit (a commit that waited for its markers,
    or markers written one at a time, never gets there: the gate's 10 s run out). None is in flight
    when the run has returned, and the walk down from a root lists them and reads nothing."""
    roots = [ExecutorStep(name=f"marks/raw{i}", fn=make_raw, config=RawConfig(f"text {i}", this_output_path()))
             for i in range(3)]
    joined = ExecutorStep(name="marks/join", fn=join,
                          config=JoinConfig(*(output_path_of(r, "data.txt") for r in roots), this_output_path()))
    gate = _Gate(at_once=6)
    original = LocalStore.create_if_absent
    monkeypatch.setattr(LocalStore, "create_if_absent", lambda store, key, data: gate.write(original, store, key, data))
    finished = []
    started = time.monotonic()
    result = api.run([joined], prefix=str(tmp_path / "p"), runner="inline", subscribers=[
        lambda e: finished.append(time.monotonic()) if isinstance(e, StepFinished) else None])
    assert result.ok, result.failed
    assert gate.opened and gate.most == 6, (gate.opened, gate.most)
    assert len(finished) == 4 and max(finished) - started < gate.wait_s  # no commit waited on the gate
    assert gate.in_flight == 0 and len(gate.done) == 6  # drained: 3 outputs/ markers, 3 consumers/ ones
    listed = sorted(key.split("/")[1] for key in open_store(str(tmp_path / "p")).list_generations("lineage/", ""))
    assert listed == ["consumers"] * 3 + ["outputs"] * 3
    ids = {s.name: s.step_id for s in result.steps}
    down = lineage_down(PrefixView.open(str(tmp_path / "p")), ids["marks/raw1"])
    assert [(n.rel, n.via) for n in down.nodes] == [(ids["marks/raw1"], None), (ids["marks/join"], "consumed by")]
    assert down.cost == {"listings": 2, "reads": 0}
