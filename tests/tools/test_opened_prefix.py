"""An opened prefix is a value: a command opens (connects to and probes) its prefix once, and every tool
given an OpenedPrefix reads and writes through it without opening the prefix again."""

from __future__ import annotations

import json
import time

import pytest

from executor.engine.prefix import location
from executor.engine.prefix.prefixes import OpenedPrefix, open_prefix

from .test_verify import _completed_step
from .toy import run_main


class Opens:
    """Counts, in this test only, the connections to a store (`location._connect`, behind every
    open_store) and the reachability probes (`location._probe`) of each location."""

    def __init__(self, monkeypatch):
        self.connects: list[str] = []
        self.probes = 0
        connect, probe = location._connect, location._probe

        def counting_connect(prefix, options):
            self.connects.append(prefix)
            return connect(prefix, options)

        def counting_probe(store):
            self.probes += 1
            return probe(store)

        monkeypatch.setattr(location, "_connect", counting_connect)
        monkeypatch.setattr(location, "_probe", counting_probe)


def location_opens(monkeypatch) -> list[str]:
    """Each open of a location in this test, by its URL: its store (open_location, open_store) or filesystem."""
    opened: list[str] = []
    for name in ("open_store", "open_filesystem"):
        def counting(prefix, *args, _real=getattr(location, name), **kwargs):
            opened.append(prefix)
            return _real(prefix, *args, **kwargs)

        monkeypatch.setattr(location, name, counting)
    return opened


def test_gc_delete_opens_and_probes_an_s3_prefix_once(toy, s3_emulator, monkeypatch):
    """`gc --delete` on a bucket: its reachability (tags for loading), listing, statuses, run files and
    deletions all go through one open; it opened and probed the bucket about seven times before."""
    prefix, options = s3_emulator.fresh_prefix("gc-once"), dict(s3_emulator.storage_options)
    for step_id in ("a/old-0123456789ab", "a/older-0123456789ab"):
        _completed_step(prefix, options, step_id, {"f": b"x" * 10})
    opens = Opens(monkeypatch)
    code, out = run_main("gc", "--prefix", prefix, "--storage-options", json.dumps(options), str(toy.path),
                         "--delete", "--grace-hours", "0")
    assert code == 0, out
    assert "deleted 2 output(s)" in out
    assert opens.connects == [prefix] and opens.probes == 1


def test_status_ps_runs_and_verify_open_their_prefix_once(ran_toy, monkeypatch):
    opens = Opens(monkeypatch)
    for command in (["status"], ["ps"], ["runs"], ["verify"], ["tags"], ["status", "toy/raw"]):
        opens.connects.clear()
        code, out = run_main(*command, "--prefix", ran_toy.prefix)
        assert code == 0, (command, out)
        assert opens.connects == [ran_toy.prefix], command


@pytest.fixture
def opened_toy(ran_toy, monkeypatch) -> tuple[OpenedPrefix, object]:
    """The toy's prefix opened (its filesystem too), then any further open of a location fails."""
    opened = open_prefix(ran_toy.prefix)
    assert opened.filesystem is not None

    def no_second_open(*args, **kwargs):
        raise AssertionError(f"a tool opened a location again: {args}")

    monkeypatch.setattr(location, "_connect", no_second_open)
    monkeypatch.setattr(location, "filesystem_of", no_second_open)
    return opened, ran_toy


def test_each_tool_given_an_opened_prefix_opens_nothing_again(opened_toy):
    from executor.tools.accept_drift import accept_drift
    from executor.tools.adopt import adopt
    from executor.tools.gc import collect, sweep
    from executor.tools.loading import load_experiment
    from executor.tools.names_commands import print_taints
    from executor.tools.run_report import write_report
    from executor.tools.serve.source import PrefixSource
    from executor.tools.step_ref import step_path
    from executor.tools.verify import verify_path

    opened, toy = opened_toy
    assert all(r.ok for r in verify_path(opened))
    raw = step_path(opened, "toy/raw")
    assert [r.ok for r in verify_path(opened, raw)] == [True]
    report = collect(opened, {})
    assert len(report.garbage) == 4
    sweep(report, opened, grace_hours=24, now=time.time())  # all within the grace period: none deleted
    assert not report.deleted and len(report.spared) == 4
    assert print_taints(opened.view, {r.step_id for r in opened.view.steps()}) == 0
    assert write_report(opened, opened.view.run().path).endswith(".html")
    source = PrefixSource(opened)
    assert source.view is opened.view and len(source.list_steps()) == 4
    old_tokenize = step_path(opened, "toy/tokenize")
    toy.write(VOCAB="8192")  # tokenize gets a new id; adopted from its earlier output, through the opened prefix
    graph = load_experiment(toy.path).graph
    adoption = adopt(graph, "toy/tokenize", old_tokenize, opened, reason="same vocabulary in effect",
                     declared_by={}, force=True)
    assert adoption.record_path and opened.view.steps([adoption.node.output_rel])[0].alias_of
    with pytest.raises(Exception, match="code is unchanged since"):  # read through the opened store
        accept_drift(graph, "toy/raw", opened, reason="same", accepted_by={})


def test_an_opened_prefix_hides_its_options():
    opened = open_prefix("memory://opened-repr", {"token": "secret-value"})
    assert "secret-value" not in repr(opened) and repr(opened) == "OpenedPrefix('memory://opened-repr')"


def test_explain_given_an_opened_prefix_opens_nothing_again(opened_toy):
    """Earlier versions are listed through the prefix the caller opened (the one its plan read)."""
    from executor.engine.events import Events, StepExplained
    from executor.tools.explain import run_explain
    from executor.tools.loading import load_experiment

    opened, toy = opened_toy
    toy.write(VOCAB="8192")
    said: list = []
    assert run_explain(load_experiment(toy.path).graph, "toy/tokenize", opened, None,
                       events=Events([said.append])) == 0
    [explained] = [e for e in said if isinstance(e, StepExplained)]
    text = "\n".join(explained.lines)
    assert "(storage) ->" in text and "4096" in text and "8192" in text, text


@pytest.mark.parametrize("how", ["command", "flag"])
def test_explain_with_cache_from_opens_its_prefix_once(ran_toy, tmp_path, monkeypatch, how):
    """`stepgraph explain` and `--explain` with --cache-from: the plan (through the API) and the listing of
    earlier versions read one opened prefix: it is opened once (it was opened twice)."""
    opens = Opens(monkeypatch)
    opened = location_opens(monkeypatch)
    ran_toy.write(VOCAB="8192")
    elsewhere = str(tmp_path / "elsewhere")
    if how == "command":
        code, out = run_main("explain", "--prefix", ran_toy.prefix, "--cache-from", elsewhere, str(ran_toy.path),
                             "toy/tokenize")
    else:
        code, out = ran_toy.run("--explain", "toy/tokenize", "--cache-from", elsewhere)
    assert code == 0, out
    assert "8192" in out, out
    assert opens.connects.count(ran_toy.prefix) == 1, opens.connects
    assert opened.count(ran_toy.prefix) == 1, opened


@pytest.mark.parametrize("how", ["dry-run", "run", "explain", "--explain"])
def test_a_cache_from_prefix_is_opened_once(ran_toy, tmp_path, monkeypatch, how):
    """A --cache-from prefix is opened once by a command that plans with it: the plan's taint check and its
    copy sources, a run, and explain's plan, per-step lines and earlier versions all read that one open
    (before: twice for a dry run or a run, four times for explain and --explain)."""
    source, here = ran_toy.prefix, str(tmp_path / "here")
    ran_toy.write(VOCAB="8192")  # raw is copied from the source; tokenize (new) and what reads it run
    opens = Opens(monkeypatch)
    opened = location_opens(monkeypatch)
    flags = ("--prefix", here, "--cache-from", source)
    if how == "explain":
        code, out = run_main("explain", *flags, str(ran_toy.path), "toy/tokenize")
    else:
        extra = {"dry-run": ("--dry-run",), "run": ("--runner", "inline"), "--explain": ("--explain", "toy/tokenize")}
        code, out = ran_toy.run(*extra[how], *flags, prefix=False)
    assert code == 0, out
    expected = {"dry-run": "copy from " + source, "run": "toy/raw      │ copied", "explain": "no SUCCESS of toy/tokenize",
                "--explain": "no SUCCESS of toy/tokenize"}[how]
    assert expected in out, out
    if how.endswith("explain"):  # the source's record of tokenize, as the earlier version
        assert f"(cache-from {source}) ->" in out and "4096 -> 8192" in out, out
    assert opened.count(source) == 1, opened
    assert opens.connects.count(source) == 1, opens.connects
