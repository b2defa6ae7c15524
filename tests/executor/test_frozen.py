"""Objects that planning builds with `new_frozen` (no __init__) are whole, equal and still frozen.

`new_frozen` applies no defaults: a field added to Status, Owner, StepNode, Observed, Decision,
StepReport or a placeholder but not passed where they are built would be missing. Each object
below comes from the real call site, and `dataclasses.replace` (which reads every field and runs
__init__) must give an equal object.
"""

from __future__ import annotations

import dataclasses

import pytest

from executor import ExecutorStep, api, output_path_of, this_output_path
from executor.core.frozen import new_frozen
from executor.core.graph import build_graph
from executor.core.outcome import outcome_of_action
from executor.core.plan import Action, Observed, PlanOptions, plan_steps
from executor.core.record import Owner, State, Status, parse_status
from executor.core.step import OutputPathOf, ThisOutputPath
from executor.engine.run.snapshot import observe
from executor.engine.store.base import Versioned
from tests.executor.test_plan import Cfg, fn  # the plan tests' config and step function


def assert_whole(obj) -> None:
    names = {f.name for f in dataclasses.fields(obj)}
    # vars(), not hasattr: a field left out of __dict__ would read its class-level default
    given = set(vars(obj)) if hasattr(obj, "__dict__") else {n for n in names if hasattr(obj, n)}  # or slots
    assert names <= given, f"{type(obj).__name__} lacks {names - given}"
    assert dataclasses.replace(obj) == obj
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, next(iter(names)), None)


def graph_and_statuses():
    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", fn, Cfg(dep=output_path_of(a)))
    weak = ExecutorStep("weak", fn, Cfg(dep=output_path_of(b).nonblocking()))
    running = ExecutorStep("running", fn, Cfg(value=2))
    failed = ExecutorStep("failed", fn, Cfg(value=3))
    after_failed = ExecutorStep("after_failed", fn, Cfg(dep=output_path_of(failed)))
    graph = build_graph([weak, b, running, after_failed])
    owner = Owner("run1", "host", 7, "ada")

    def observed(step, state, **extra):
        node = graph.nodes[graph.digest_of(step)]
        data = Status(state, node.digest, node.step_id, 1, 1, owner, 100.0, **extra).to_bytes()
        return observe(Versioned(data, "gen-1"), f"x/{node.step_id}")

    snapshot = {graph.digest_of(a): observed(a, State.SUCCESS, content_sha256="c1"),
                graph.digest_of(b): observed(b, State.SUCCESS, inputs={graph.digest_of(a): "c1"}),
                graph.digest_of(running): observed(running, State.RUNNING),
                graph.digest_of(failed): observed(failed, State.FAILED, error="boom")}
    return graph, snapshot, (a, b, weak, running, failed, after_failed)


def test_statuses_nodes_and_observations_are_whole():
    graph, snapshot, steps = graph_and_statuses()
    for node in graph.nodes.values():
        assert_whole(node)
    assert any(node.weak_deps for node in graph.nodes.values())
    for seen in snapshot.values():
        assert_whole(seen)
        assert_whole(seen.status)
        assert_whole(seen.status.owner)
    assert observe(None, "x") == Observed(None)


def test_a_snapshot_shares_one_owner_object_per_runner(tmp_path):
    """10,000 statuses one run wrote hold one Owner object, not 10,000 equal ones."""
    from executor.core.record import status_key
    from executor.engine.run.snapshot import read_snapshot
    from executor.engine.store.local import LocalStore

    graph, _, _ = graph_and_statuses()
    store = LocalStore(str(tmp_path))
    owners = [Owner("run1", "host", 7, "ada"), Owner("run2", "host", 8, "ada")]
    nodes = list(graph.nodes.values())
    for i, node in enumerate(nodes):
        data = Status(State.SUCCESS, node.digest, node.step_id, 1, 1, owners[i % 2], 1.0).to_bytes()
        store.create_if_absent(status_key(node.output_rel), data)
    snapshot = read_snapshot(store, nodes)
    read = [snapshot[node.digest].status for node in nodes]
    assert [status.owner for status in read] == [owners[i % 2] for i in range(len(nodes))]
    assert len({id(status.owner) for status in read}) == 2
    for node, status in zip(nodes, read):
        assert_whole(status)
        assert status == parse_status(store.read(status_key(node.output_rel)).data, "x")


S, R, W, B, X = Action.SKIP, Action.RUN, Action.WAIT, Action.BLOCKED, Action.STOP
STEPS = ("a", "b", "weak", "running", "failed", "after_failed")


@pytest.mark.parametrize("options, actions, rechecked", [
    (PlanOptions(now=130.0), (S, S, R, W, R, R), ()),
    (PlanOptions(force_failed=False), (S, S, R, W, X, B), ()),
    (PlanOptions(force_run="^a$"), (R, S, R, W, R, R), ("b",)),  # b kept for now, rechecked when a commits
])
def test_every_kind_of_decision_is_whole(options, actions, rechecked):
    graph, snapshot, _ = graph_and_statuses()
    plan = plan_steps(graph, snapshot, options)
    for decision in plan.decisions.values():
        assert_whole(decision)
    decided = {d.node.name: d for d in plan.decisions.values()}
    assert {name: decided[name].action for name in STEPS} == dict(zip(STEPS, actions))
    assert tuple(name for name in STEPS if decided[name].recheck) == rechecked


def test_plan_and_no_op_run_reports_are_whole(tmp_path):
    step = ExecutorStep("only", fn, Cfg(value=5))
    planned = api.plan([step], prefix=str(tmp_path))
    for report in planned.steps:
        assert_whole(report)
    assert api.run([step], prefix=str(tmp_path), runner="inline").ok
    again = api.run([step], prefix=str(tmp_path), runner="inline")  # nothing to do: the no-op path
    assert again.run_file is None
    for report in again.steps:
        assert_whole(report)
        assert report.status == "succeeded"


def test_placeholders_are_whole():
    step = ExecutorStep("a", fn, Cfg())
    for placeholder in (output_path_of(step), output_path_of(step, "sub/dir"), this_output_path(),
                        this_output_path("x")):
        assert_whole(placeholder)
        assert not hasattr(placeholder, "__dict__")  # slots: 10,000 steps' placeholders cost ~60 bytes each
    assert output_path_of(step, "s") == OutputPathOf(step, "s", True) and this_output_path() == ThisOutputPath(None)


def test_a_steps_whole_output_placeholder_is_made_once_and_belongs_to_that_step_only():
    """output_path_of(step) is one object per step (a step read by three others makes one
    placeholder, not three: fewer objects for the collector while experiments declare); a copy of
    the step, or a step made by replace(), gets its own, pointing at itself; the graph and ids are
    what separate placeholders give."""
    import copy

    step = ExecutorStep("a", fn, Cfg(value=1))
    first = output_path_of(step)
    assert output_path_of(step) is first and step.cd("x") is not first and first.step is step
    assert first.nonblocking() is not first and output_path_of(step) is first  # frozen: nothing changes it
    for other in (copy.copy(step), dataclasses.replace(step), copy.deepcopy(step)):
        assert output_path_of(other).step is other and output_path_of(other) is output_path_of(other)
    assert output_path_of(step) is first and "_whole_output" not in {f.name for f in dataclasses.fields(step)}
    assert repr(step) == "ExecutorStep('a')" and dataclasses.replace(step).config == step.config
    readers = [ExecutorStep(f"r{i}", fn, Cfg(dep=output_path_of(step))) for i in range(3)]
    separate = [ExecutorStep(f"r{i}", fn, Cfg(dep=OutputPathOf(step))) for i in range(3)]
    shared_graph, separate_graph = build_graph(readers), build_graph(separate)
    assert [n.step_id for n in shared_graph.nodes.values()] == [n.step_id for n in separate_graph.nodes.values()]
    assert len(shared_graph.nodes) == 4 and len({id(r.config.dep) for r in readers}) == 1


def test_new_frozen_is_the_constructor_without_init():
    owner = new_frozen(Owner, {"run_id": "r", "host": "h", "pid": 1, "user": "u"})
    assert owner == Owner("r", "h", 1, "u") and hash(owner) == hash(Owner("r", "h", 1, "u"))
    assert parse_status(Status(State.SUCCESS, "d", "s-d", 1, 1, owner, 1.0).to_bytes(), "x").owner == owner


@pytest.mark.parametrize("prefix", ["/p/q", "gs://bucket/p/"])
def test_a_no_op_runs_reports_are_the_reports_every_run_makes(prefix):
    """A run with nothing to run writes its reports in one loop (api._ended_as_planned): each is
    the report `_report` makes for that decision, an adopted output's path and a stopped or blocked
    step's error included."""
    graph, snapshot, (a, *_) = graph_and_statuses()
    adopted = graph.nodes[graph.digest_of(a)]
    data = Status(State.SUCCESS, adopted.digest, adopted.step_id, 1, 1, None, 1.0,
                  alias_of={"output_rel": "old/a-123", "step_id": "a-123", "digest": "d0"}).to_bytes()
    snapshot[adopted.digest] = observe(Versioned(data, "gen-2"), "x")
    decisions = [d for options in (PlanOptions(now=130.0), PlanOptions(force_failed=False))
                 for d in plan_steps(graph, snapshot, options).decisions.values()]
    assert {d.action for d in decisions} >= {S, R, W, B, X}
    reports = api._ended_as_planned(prefix, decisions)
    expected = []
    for d in decisions:
        status = outcome_of_action(d.action)
        expected.append(api._report(prefix, d, status=status, error=d.reason if status.unsuccessful else None))
    assert reports == tuple(expected)
    assert reports[0].output_path == prefix.rstrip("/") + "/old/a-123"
    for report in reports:
        assert_whole(report)
