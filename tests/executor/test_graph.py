"""Discovery, de-duplication, cycles, names and output-path clashes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from executor import ExecutorStep, GraphError, output_path_of, this_output_path
from executor.core.graph import build_graph


@dataclass
class Cfg:  # deliberately mutable: the only way to build a cycle
    deps: list = field(default_factory=list)
    nested: dict = field(default_factory=dict)
    value: int = 0
    output_path: object = None


def fn(config):
    return None


def test_dependencies_found_at_any_depth_and_ordered_first():
    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", fn, Cfg(value=2))
    c = ExecutorStep("c", fn, Cfg(deps=[{"x": (output_path_of(a),)}], nested={"n": Cfg(deps=[output_path_of(b, "f")])}))
    graph = build_graph([c])
    names = [n.name for n in graph.nodes.values()]
    assert names.index("a") < names.index("c") and names.index("b") < names.index("c")
    assert set(graph.nodes[graph.targets[0]].deps) == {graph.digest_of(a), graph.digest_of(b)}


def test_identical_steps_declared_twice_collapse():
    a1 = ExecutorStep("a", fn, Cfg(value=1))
    a2 = ExecutorStep("a", fn, Cfg(value=1))
    user = ExecutorStep("u", fn, Cfg(deps=[output_path_of(a1), output_path_of(a2)]))
    graph = build_graph([user, a2])
    assert len(graph.nodes) == 2
    assert graph.digest_of(a1) == graph.digest_of(a2)


def test_cycle_is_reported_with_step_names():
    a = ExecutorStep("first", fn, Cfg())
    b = ExecutorStep("second", fn, Cfg(deps=[output_path_of(a)]))
    a.config.deps.append(output_path_of(b))
    with pytest.raises(GraphError, match="cycle: first -> second -> first"):
        build_graph([a])


@pytest.mark.parametrize("name", ["", "/abs", "a/../b", "a//b", ".hidden", "runs/x", "runs", "a b", "a/./b", "ü"])
def test_unsafe_names_are_rejected(name):
    with pytest.raises(ValueError, match="name"):
        ExecutorStep(name, fn, Cfg())


def test_two_different_steps_on_one_output_path():
    a = ExecutorStep("a", fn, Cfg(value=1), override_output_path="shared/out")
    b = ExecutorStep("b", fn, Cfg(value=2), override_output_path="shared/out")
    with pytest.raises(GraphError, match="both write to 'shared/out'"):
        build_graph([a, b])


def test_nonblocking_dependency_is_hashed_but_not_awaited():
    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", fn, Cfg(deps=[output_path_of(a).nonblocking()]))
    graph = build_graph([b])
    node = graph.nodes[graph.targets[0]]
    assert node.deps == () and node.weak_deps == (graph.digest_of(a),)
    a_changed = ExecutorStep("a", fn, Cfg(value=2))
    b2 = ExecutorStep("b", fn, Cfg(deps=[output_path_of(a_changed).nonblocking()]))
    assert build_graph([b2]).targets != graph.targets


def test_lambdas_and_nested_functions_are_rejected():
    def nested(config):
        return None

    with pytest.raises(ValueError, match="module level"):
        ExecutorStep("a", lambda c: None, Cfg())
    with pytest.raises(ValueError, match="module level"):
        ExecutorStep("a", nested, Cfg())


def test_output_subpath_cannot_escape():
    with pytest.raises(ValueError, match="relative path"):
        this_output_path("../x")


def test_identity_document_is_encoded_again_and_must_still_match_the_id():
    """Nodes keep no copy of the document they hashed (1-2 KB per step): asking for it encodes
    the config again, and a config changed since then is an error, not a document that does
    not match the step's id."""
    from executor.core.identity import identity_and_digest

    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", fn, Cfg(deps=[output_path_of(a)], nested={"k": [1, 2]}))
    graph = build_graph([b])
    node = graph.nodes[graph.digest_of(b)]
    assert node.identity_bytes == identity_and_digest(b, lambda p: graph.digest_of(p.step))[0]
    assert node.identity["config"]["fields"]["deps"] == [{"dependency": graph.digest_of(a), "sub": None}]
    b.config.nested["k"].append(3)  # mutated after its id was computed
    with pytest.raises(GraphError, match=r"step 'b': its config changed after its id \(b-[0-9a-f]{12}\)"):
        node.identity_bytes


def test_a_step_whose_config_changed_after_planning_fails_before_it_runs(tmp_path):
    """The run checks each step's document against its id before the step starts: a config an
    earlier step changed in place (possible where steps run on threads of the planning process,
    a memory:// prefix) fails that step rather than run a config its id does not name."""
    from executor import api

    _SHARED.clear(), _RAN.clear()
    a = ExecutorStep("a", fn, Cfg(value=1))
    b = ExecutorStep("b", _append_to_shared, Cfg(deps=[output_path_of(a)]))
    c = ExecutorStep("c", _note_run, Cfg(deps=[output_path_of(b)], nested={"list": _SHARED}))
    result = api.run([c], prefix=f"memory://{tmp_path.name}", runner="inline")
    assert [(s.name, s.status) for s in result.steps] == [("a", "succeeded"), ("b", "succeeded"), ("c", "failed")]
    assert "config changed after its id" in result.step(c).error and not _RAN


_SHARED: list = []  # in c's config, and changed by b (a step gets a copy of its own config, not of others')


_RAN: list = []


def _append_to_shared(config):
    _SHARED.append("changed by b")


def _note_run(config):
    _RAN.append(config)
