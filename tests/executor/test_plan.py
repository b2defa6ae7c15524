"""Planning is a pure function of the graph and a status snapshot."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from executor import ExecutorStep, GraphError, output_path_of
from executor.core.graph import build_graph
from executor.core.plan import Action, Observed, PlanOptions, plan_steps
from executor.core.record import Owner, State, Status


@dataclass(frozen=True)
class Cfg:
    dep: object = None
    value: int = 0


def fn(config):
    return None


def chain():
    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", fn, Cfg(dep=output_path_of(a)))
    c = ExecutorStep("c", fn, Cfg(dep=output_path_of(b)))
    side = ExecutorStep("side", fn, Cfg(value=9))
    return build_graph([c, side]), a, b, c, side


def status(graph, step, state, error=None):
    d = graph.digest_of(step)
    owner = Owner("run1", "hostA", 42, "ada")
    return Observed(Status(state, d, graph.nodes[d].step_id, 3, 1, owner, written_at=100.0, error=error), "gen")


def actions(plan):
    return {d.node.name: (d.action, d.reason) for d in plan.decisions.values()}


def test_new_steps_run():
    graph, *_ = chain()
    plan = plan_steps(graph, {}, PlanOptions())
    assert {n: a for n, (a, _) in actions(plan).items()} == dict.fromkeys(["a", "b", "c", "side"], Action.RUN)
    assert actions(plan)["a"][1] == "new: no previous attempt"


def test_success_skips_running_waits_with_owner_and_age():
    graph, a, b, c, side = chain()
    snap = {graph.digest_of(a): status(graph, a, State.SUCCESS), graph.digest_of(b): status(graph, b, State.RUNNING)}
    acts = actions(plan_steps(graph, snap, PlanOptions(now=112.0)))
    assert acts["a"] == (Action.SKIP, "succeeded")
    assert acts["b"][0] == Action.WAIT and "hostA pid 42" in acts["b"][1] and "12s ago" in acts["b"][1]
    assert acts["c"][0] == Action.RUN


def test_failed_is_retried_by_default_and_stopped_otherwise():
    graph, a, b, c, side = chain()
    snap = {graph.digest_of(b): status(graph, b, State.FAILED, error="boom")}
    acts = actions(plan_steps(graph, snap, PlanOptions()))
    assert acts["b"] == (Action.RUN, "previous attempt failed: boom")
    acts = actions(plan_steps(graph, snap, PlanOptions(force_failed=False)))
    assert acts["b"][0] == Action.STOP and "boom" in acts["b"][1]
    assert acts["c"] == (Action.BLOCKED, "dependency b failed")
    assert acts["side"][0] == Action.RUN and acts["a"][0] == Action.RUN


def test_only_selects_matches_and_what_they_need():
    graph, *_ = chain()
    plan = plan_steps(graph, {}, PlanOptions(only="^b$"))
    assert [d.node.name for d in plan.decisions.values()] == ["a", "b"]
    with pytest.raises(GraphError, match="matches no step"):
        plan_steps(graph, {}, PlanOptions(only="nope"))


def test_force_run_reruns_succeeded_steps():
    graph, a, *_ = chain()
    snap = {graph.digest_of(a): status(graph, a, State.SUCCESS)}
    assert actions(plan_steps(graph, snap, PlanOptions(force_run="^a$")))["a"][0] == Action.RUN


def test_digest_mismatch_at_the_same_path_stops():
    graph, a, b, *_ = chain()
    wrong = status(graph, b, State.SUCCESS)
    snap = {graph.digest_of(a): wrong}
    with pytest.raises(GraphError, match="collision"):
        plan_steps(graph, snap, PlanOptions())


def test_a_failed_dependency_blocks_only_dependents_not_already_succeeded():
    graph, a, b, c, side = chain()
    with_c = lambda state: {graph.digest_of(b): status(graph, b, State.FAILED, error="boom"),  # noqa: E731
                            graph.digest_of(c): status(graph, c, state)}
    acts = actions(plan_steps(graph, with_c(State.SUCCESS), PlanOptions(force_failed=False)))
    assert acts["b"][0] == Action.STOP and acts["c"] == (Action.SKIP, "succeeded")  # its output stands
    for state in (State.FAILED, State.RUNNING):
        acts = actions(plan_steps(graph, with_c(state), PlanOptions(force_failed=False, now=200.0)))
        assert acts["c"] == (Action.BLOCKED, "dependency b failed"), state


def test_a_dependent_is_stale_exactly_when_its_dependencys_content_changed():
    import dataclasses

    graph, a, b, c, side = chain()
    consumed = "5" * 64
    c_status = status(graph, c, State.SUCCESS).status
    c_status = dataclasses.replace(c_status, inputs={graph.digest_of(b): consumed})
    for now_there, stale in ((consumed, False), ("0" * 64, True), ("f" * 64, True)):
        b_status = dataclasses.replace(status(graph, b, State.SUCCESS).status, content_sha256=now_there)
        snap = {graph.digest_of(a): status(graph, a, State.SUCCESS), graph.digest_of(b): Observed(b_status, "g"),
                graph.digest_of(c): Observed(c_status, "g")}
        action, reason = actions(plan_steps(graph, snap, PlanOptions()))["c"]
        assert (action == Action.RUN) is stale and (reason.startswith("stale: dependency b")) is stale, now_there


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_the_json_plan_is_the_rows_on_any_stream(encoding):
    """--dry-run --json: rows encoded by orjson on a UTF-8 stream, by json's escapes on any other."""
    import io
    import json

    from executor.engine.prefix import outputs
    from executor.tools.plan_json import plan_rows, write_plan_json

    graph, a, b, c, side = chain()
    snap = {graph.digest_of(a): status(graph, a, State.FAILED, error="échec: 検証 failed ☃"),
            graph.digest_of(side): status(graph, side, State.RUNNING)}
    plan = plan_steps(graph, snap, PlanOptions(now=130.5))
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    write_plan_json(plan, "gs://bucket/prefix/", stream)
    stream.flush()
    document = json.loads(stream.buffer.getvalue().decode(encoding))
    assert document == {"schema": 1, "prefix": "gs://bucket/prefix/", "steps": plan_rows(plan, "gs://bucket/prefix/")}
    assert "échec: 検証" in document["steps"][0]["reason"] and document["steps"][-1]["lease"]["pid"] == 42
    # a lease only on a step that waits for its holder (the failed step's status has an owner too); each
    # output path as outputs.join makes it; every action a plain word
    failed_row, rows = document["steps"][0], plan_rows(plan, "gs://bucket/prefix/")
    assert failed_row["lease"] is None and failed_row["action"] != "wait"
    assert [r["output_path"] for r in rows] == [outputs.join("gs://bucket/prefix/", d.node.output_rel)
                                                for d in plan.decisions.values()]
    assert {type(r["action"]) for r in rows} == {str}


def test_a_json_plan_of_thousands_of_steps_is_one_document():
    import io
    import json

    from executor.tools.plan_json import write_plan_json

    graph = build_graph([ExecutorStep(f"s{i}", fn, Cfg(value=i)) for i in range(2345)])  # rows go out 1,000 at a time
    stream = io.StringIO()
    write_plan_json(plan_steps(graph, {}, PlanOptions()), "/p", stream)
    assert [row["name"] for row in json.loads(stream.getvalue())["steps"]] == [f"s{i}" for i in range(2345)]



def diamond():
    """a and b, both read by top (the target)."""
    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", fn, Cfg(value=2))
    top = ExecutorStep("top", fn, Cfg(dep=[output_path_of(a), output_path_of(b)]))
    return build_graph([top]), a, b, top


def copied(graph, step, **changes):
    """A SUCCESS status a --cache-from copy wrote."""
    import dataclasses

    return Observed(dataclasses.replace(status(graph, step, State.SUCCESS).status, copied_from="gs://a/runs",
                                        **changes), "gen")


def test_steps_only_copies_read_are_set_aside_not_run():
    """A target copied here by --cache-from, whose upstream was never made here (or failed here):
    the upstream is neither run nor waited for, and the plan says why; `side`, a target of its own,
    still runs. The same target made here (not copied) with its upstream gone: the upstream runs
    (as after `repair --delete-status`)."""
    graph, a, b, c, side = chain()
    for b_status in ({}, {graph.digest_of(b): status(graph, b, State.FAILED, error="boom")}):
        plan = plan_steps(graph, {graph.digest_of(c): copied(graph, c), **b_status}, PlanOptions())
        assert actions(plan) == {"c": (Action.SKIP, "succeeded (copied from gs://a/runs)"),
                                 "side": (Action.RUN, "new: no previous attempt")}
        assert {d.node.name: d.reason for d in plan.standby.values()} == {
            "a": "not needed here (new: no previous attempt)",
            "b": "not needed here (previous attempt failed: boom)" if b_status else
                 "not needed here (new: no previous attempt)"}
    plan = plan_steps(graph, {graph.digest_of(c): status(graph, c, State.SUCCESS)}, PlanOptions())
    assert [d.node.name for d in plan.by_action(Action.RUN)] == ["a", "b", "side"] and not plan.standby


def test_setting_steps_aside_stops_after_a_pass_that_changes_nothing(monkeypatch):
    """The set-aside walk repeats only while a pass takes a step back out of "not needed here": a
    plan of a copied target over two missing steps settles in one pass (one reader looked at). A walk
    that went on after such a pass would hang the planner; here it fails at a bound on the readers
    looked at, with no clock."""
    import executor.core.plan as plan_module

    looked_at = []
    real = plan_module._copy_staying_complete

    def counted(decision, aside):
        looked_at.append(decision.node.name)
        assert len(looked_at) <= 100, "the set-aside walk did not stop"
        return real(decision, aside)

    monkeypatch.setattr(plan_module, "_copy_staying_complete", counted)
    graph, a, b, c, side = chain()
    plan = plan_steps(graph, {graph.digest_of(c): copied(graph, c)}, PlanOptions())
    assert sorted(d.node.name for d in plan.standby.values()) == ["a", "b"]
    assert looked_at == ["c"]  # b's one reader, the copy; a's reader is b, itself set aside


def test_a_set_aside_step_runs_when_something_will_read_it():
    """--force-run of the copied target, --only naming the upstream, or the upstream a target
    itself: they run."""
    graph, a, b, c, side = chain()
    snap = {graph.digest_of(c): copied(graph, c)}
    plan = plan_steps(graph, snap, PlanOptions(force_run="^c$"))
    assert [d.node.name for d in plan.by_action(Action.RUN)] == ["a", "b", "c", "side"] and not plan.standby
    plan = plan_steps(graph, snap, PlanOptions(only="^b$"))
    assert [d.node.name for d in plan.by_action(Action.RUN)] == ["a", "b"] and not plan.standby
    both = build_graph([c, b])
    plan = plan_steps(both, snap, PlanOptions())
    assert [d.node.name for d in plan.by_action(Action.RUN)] == ["a", "b"] and not plan.standby


def test_a_missing_step_is_run_when_its_copied_reader_may_re_run():
    """top (copied) consumed a and b; b is re-run (--force-run), so top is re-checked and may
    re-run, reading a: a runs. Without the re-run, a is set aside and top is a plain skip."""
    graph, a, b, top = diamond()
    inputs = {graph.digest_of(a): "1" * 64, graph.digest_of(b): "2" * 64}
    snap = {graph.digest_of(b): status(graph, b, State.SUCCESS),
            graph.digest_of(top): copied(graph, top, inputs=inputs)}
    plan = plan_steps(graph, snap, PlanOptions(force_run="^b$"))
    assert [d.node.name for d in plan.by_action(Action.RUN)] == ["a", "b"] and not plan.standby
    assert set(plan.decisions[graph.digest_of(top)].recheck) == {graph.digest_of(a), graph.digest_of(b)}
    plan = plan_steps(graph, snap, PlanOptions())
    assert actions(plan) == {"b": (Action.SKIP, "succeeded"),
                             "top": (Action.SKIP, "succeeded (copied from gs://a/runs)")}
    assert plan.decisions[graph.digest_of(top)].recheck == () and list(plan.standby) == [graph.digest_of(a)]


@pytest.mark.parametrize("reads", ["ab", "ba"])
def test_a_missing_step_a_copy_may_re_run_and_read_is_run_however_the_steps_are_ordered(reads):
    """top (copied) consumed x and y, both missing here; side, made here, reads x. x must run
    (side reads it), so top is re-checked against x and may re-run, reading y: y runs too, whichever
    of the two the plan settles first (one pass over the steps would leave one "not needed here")."""
    x, y = ExecutorStep("x", fn, Cfg(value=1)), ExecutorStep("y", fn, Cfg(value=2))
    first, second = (x, y) if reads == "ab" else (y, x)
    top = ExecutorStep("top", fn, Cfg(dep=[output_path_of(first), output_path_of(second)]))
    side = ExecutorStep("side", fn, Cfg(dep=output_path_of(x)))
    graph = build_graph([top, side])
    inputs = {graph.digest_of(x): "1" * 64, graph.digest_of(y): "2" * 64}
    plan = plan_steps(graph, {graph.digest_of(top): copied(graph, top, inputs=inputs)}, PlanOptions())
    assert sorted(d.node.name for d in plan.by_action(Action.RUN)) == ["side", "x", "y"], actions(plan)
    assert not plan.standby, {d.node.name: d.reason for d in plan.standby.values()}
    assert set(plan.decisions[graph.digest_of(top)].recheck) == {graph.digest_of(x), graph.digest_of(y)}


def _two_deps():
    """a and b independent; c needs a, then b."""
    a, b = ExecutorStep("a", fn, Cfg(value=1)), ExecutorStep("b", fn, Cfg(value=2))
    c = ExecutorStep("c", fn, Cfg(dep=[output_path_of(a), output_path_of(b)]))
    return build_graph([c]), a, b, c


def _consumed(graph, c, inputs):
    import dataclasses

    return Observed(dataclasses.replace(status(graph, c, State.SUCCESS).status, inputs=inputs), "g")


def test_a_succeeded_step_rechecks_a_rerunning_dependency_and_still_sees_a_stale_one_after_it():
    import dataclasses

    graph, a, b, c = _two_deps()
    da, db = graph.digest_of(a), graph.digest_of(b)
    b_now = lambda content: Observed(dataclasses.replace(status(graph, b, State.SUCCESS).status,  # noqa: E731
                                                          content_sha256=content), "g")
    same = "".join(["1"] * 64)  # equal to what c consumed, another string object
    snap = {db: b_now(same), graph.digest_of(c): _consumed(graph, c, {da: "0" * 64, db: "1" * 64})}
    decision = plan_steps(graph, snap, PlanOptions()).decisions[graph.digest_of(c)]  # a runs: it is new
    assert (decision.action, decision.recheck) == (Action.SKIP, (da,))
    assert decision.reason == "succeeded; re-run if a commits a different output"
    snap[db] = b_now("2" * 64)  # b's output changed: stale, whatever a does
    assert actions(plan_steps(graph, snap, PlanOptions()))["c"][0] == Action.RUN
    snap[graph.digest_of(c)] = _consumed(graph, c, {db: "1" * 64})  # a not among the inputs it recorded
    assert actions(plan_steps(graph, snap, PlanOptions()))["c"][0] == Action.RUN


def test_a_succeeded_step_does_not_recheck_a_blocked_dependency_and_blocks_name_the_first_failure():
    graph, a, b, c = _two_deps()
    da, db = graph.digest_of(a), graph.digest_of(b)
    failed = {da: status(graph, a, State.FAILED, error="x"), db: status(graph, b, State.FAILED, error="y")}
    acts = actions(plan_steps(graph, failed, PlanOptions(force_failed=False)))
    assert acts["c"] == (Action.BLOCKED, "dependency a failed")  # the first of its failed dependencies
    graph, a, b, c, _ = chain()
    snap = {graph.digest_of(a): status(graph, a, State.FAILED, error="x"),
            graph.digest_of(c): _consumed(graph, c, {graph.digest_of(b): "1" * 64})}
    plan = plan_steps(graph, snap, PlanOptions(force_failed=False))
    assert actions(plan)["b"] == (Action.BLOCKED, "dependency a failed")
    assert plan.decisions[graph.digest_of(c)].recheck == () and actions(plan)["c"] == (Action.SKIP, "succeeded")
    side = ExecutorStep("d", fn, Cfg(dep=output_path_of(b)))
    graph = build_graph([side])
    acts = actions(plan_steps(graph, {graph.digest_of(a): status(graph, a, State.FAILED)}, PlanOptions(force_failed=False)))
    assert acts["d"] == (Action.BLOCKED, "dependency b is blocked")


def test_decisions_are_listed_by_action_and_a_plan_of_skips_needs_no_runner():
    from dataclasses import FrozenInstanceError

    graph, a, b, c, side = chain()
    snap = {graph.digest_of(a): status(graph, a, State.SUCCESS), graph.digest_of(b): status(graph, b, State.RUNNING)}
    plan = plan_steps(graph, snap, PlanOptions())
    assert [d.node.name for d in plan.by_action(Action.RUN)] == ["c", "side"]
    assert [d.node.name for d in plan.by_action(Action.SKIP)] == ["a"]
    assert [d.node.name for d in plan.by_action(Action.WAIT)] == ["b"] and plan.needs_runner is True
    skips = plan_steps(graph, {d: status(graph, n.step, State.SUCCESS) for d, n in graph.nodes.items()}, PlanOptions())
    assert skips.needs_runner is False
    for frozen in (plan, plan.decisions[graph.digest_of(a)], PlanOptions()):
        with pytest.raises(FrozenInstanceError):
            frozen.reason = "x"  # type: ignore[misc]


def test_a_heartbeat_age_is_exact_and_never_negative():
    graph, a, b, c, side = chain()
    snap = {graph.digest_of(b): status(graph, b, State.RUNNING)}  # written at 100.0
    assert actions(plan_steps(graph, snap, PlanOptions(now=112.0)))["b"][1].endswith(", heartbeat 12s ago")
    assert actions(plan_steps(graph, snap, PlanOptions(now=95.0)))["b"][1].endswith(", heartbeat 0s ago")  # skew


def test_a_status_of_another_digest_is_refused_whichever_digest_is_larger():
    import re

    graph, a, b, *_ = chain()
    for here, there in ((a, b), (b, a)):
        with pytest.raises(GraphError) as refused:
            plan_steps(graph, {graph.digest_of(here): status(graph, there, State.SUCCESS)}, PlanOptions())
        assert re.search(r"digest [0-9a-f]{16}… but this step's digest is [0-9a-f]{16}… \(a 48-bit", str(refused.value))


def test_a_bad_regular_expression_is_a_graph_error():
    graph, *_ = chain()
    with pytest.raises(GraphError, match="names no step and is not a valid regular expression"):
        plan_steps(graph, {}, PlanOptions(only="(unclosed"))
