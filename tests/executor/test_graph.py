"""Discovery, de-duplication, cycles, names and output-path clashes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from executor import ConfigEncodingError, ExecutorStep, GraphError, output_path_of, register_encoding, this_output_path
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
    """A GraphError (exit 2 on the command line) when the graph is built, not at declaration: steps
    are often declared at import time, where an error would be a traceback and exit 1 (issue 47)."""
    step = ExecutorStep(name, fn, Cfg())
    with pytest.raises(GraphError, match=f"step name {name!r}"):
        build_graph([step])
    ok = ExecutorStep("ok", fn, Cfg(deps=[output_path_of(step)]))
    with pytest.raises(GraphError, match="step name"):  # a dependency's name is checked too
        build_graph([ok])


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


def _copy(text: str) -> str:
    """An equal string that is not the same object: lookups must compare by value."""
    return "".join(list(text))


def test_a_step_is_found_by_its_name_or_its_id_and_no_other_is():
    a, b, c = (ExecutorStep(n, fn, Cfg(value=i)) for i, n in enumerate(["aaa", "bbb", "ccc"]))
    graph = build_graph([a, b, c])
    node_b, node_c = graph.nodes[graph.digest_of(b)], graph.nodes[graph.digest_of(c)]
    assert graph.node_by_name(_copy("bbb")) == [node_b]
    assert graph.node_by_name(_copy(node_c.step_id)) == [node_c]
    assert graph.node_by_name("bb") == []


def test_dependents_lists_every_blocking_user_of_a_step():
    a = ExecutorStep("a", fn, Cfg(value=1))
    b, c = (ExecutorStep(n, fn, Cfg(deps=[output_path_of(a)], value=i)) for i, n in enumerate("bc"))
    graph = build_graph([b, c])
    users = graph.dependents()
    assert sorted(users[graph.digest_of(a)]) == sorted([graph.digest_of(b), graph.digest_of(c)])
    assert users[graph.digest_of(b)] == [] and len(users) == 3



@pytest.mark.timeout(10)  # a closure that stops taking steps off its stack never returns: fail it, not the suite
def test_a_closure_is_the_steps_and_everything_they_need_blockingly():
    a, weak, side = (ExecutorStep(n, fn, Cfg(value=i)) for i, n in enumerate(["a", "weak", "side"]))
    b = ExecutorStep("b", fn, Cfg(deps=[output_path_of(a), output_path_of(weak).nonblocking()]))
    c = ExecutorStep("c", fn, Cfg(deps=[output_path_of(b), output_path_of(a)]))
    graph = build_graph([c, side])

    def closure(*steps):
        return sorted(graph.nodes[d].name for d in graph.closure(graph.digest_of(s) for s in steps))

    assert closure(c) == ["a", "b", "c"]
    assert closure(b, side) == ["a", "b", "side"]
    assert closure(weak) == ["weak"] and closure() == []

def test_building_a_graph_leaves_the_garbage_collector_as_it_found_it():
    import gc

    was = gc.isenabled()
    try:
        gc.enable()
        build_graph([ExecutorStep("a", fn, Cfg())])
        assert gc.isenabled()
        gc.disable()
        build_graph([ExecutorStep("a", fn, Cfg())])
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.timeout(30)  # a walk that loses its place never ends: fail it, well before the suite's limit
def test_a_chain_deeper_than_the_recursion_bound_is_ordered_and_its_cycle_named():
    steps = [ExecutorStep("s0", fn, Cfg())]
    for i in range(1, 80):
        steps.append(ExecutorStep(f"s{i}", fn, Cfg(deps=[output_path_of(steps[-1])])))
    graph = build_graph([steps[-1]])
    assert [n.name for n in graph.nodes.values()] == [s.name for s in steps]
    assert all(graph.nodes[graph.digest_of(s)].deps == (graph.digest_of(p),) for p, s in zip(steps, steps[1:]))
    for closing in (79, 47):  # the loop closes at the top, or deep inside the chain
        steps[0].config.deps[:] = [output_path_of(steps[closing])]
        with pytest.raises(GraphError, match="dependency cycle: ") as cycle:
            build_graph([steps[-1]])
        named = str(cycle.value).removeprefix("dependency cycle: ").split(" -> ")
        expected = [f"s{i}" for i in range(closing, -1, -1)]  # every step of the loop, in order
        start = expected.index(named[0])
        assert named == expected[start:] + expected[:start] + [named[0]]



class _Refused:
    """A value whose registered encoding always fails, counting its tries."""

    tries = 0


def _refuse(value: _Refused) -> None:
    _Refused.tries += 1
    raise ValueError("refused on purpose")


@pytest.mark.parametrize("depth", [1, 8, 80])  # 80: deeper than the walk recurses (MAX_NESTED_STEPS)
def test_a_config_refused_deep_in_a_chain_is_reported_once_naming_its_step_and_field(depth):
    """The encoder retries a refused container field by field to name the field; a dependency that
    failed is not walked again for that: the error costs one walk of the chain, not 2**depth."""
    register_encoding(_Refused, _refuse)
    steps = [ExecutorStep("s0", fn, Cfg(value=_Refused()))]
    for i in range(1, depth):
        steps.append(ExecutorStep(f"s{i}", fn, Cfg(deps=[output_path_of(steps[-1])])))
    _Refused.tries = 0
    with pytest.raises(ConfigEncodingError, match=r"step 's0': config field `value` .*refused on purpose"):
        build_graph([steps[-1]])
    assert _Refused.tries == 2  # the fast path, then the field-by-field retry that names it

def test_graph_and_nodes_are_values_compared_without_the_shared_digest_and_tag_tables():
    """A node's digest and tag tables are the whole graph's (shared): left out of its == and its repr."""
    from dataclasses import FrozenInstanceError

    from executor import output_of_tag

    a = ExecutorStep("a", fn, Cfg(value=1))
    reader = ExecutorStep("z", fn, Cfg(nested={"in": output_of_tag("corpus/raw@v1")}))
    alone = build_graph([a])
    with_other = build_graph([a, reader], tags=lambda tag: _TagEntry("a" * 64, "raw-aaaa"))
    node = alone.nodes[alone.digest_of(a)]
    assert node == with_other.nodes[with_other.digest_of(a)]  # the digest and tag tables differ between the graphs
    assert with_other.nodes[with_other.digest_of(a)].tags and not node.tags
    assert "digests" not in repr(node) and "tags=" not in repr(with_other.nodes[with_other.digest_of(a)])
    with pytest.raises(FrozenInstanceError):
        alone.targets = ()  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):  # nodes are shared by plans and tools: none may change one
        node.output_rel = "elsewhere"  # type: ignore[misc]


def test_a_config_changed_after_planning_is_refused_whichever_way_its_digest_moves():
    a = ExecutorStep("a", fn, Cfg(value=0))
    node = build_graph([a]).nodes[build_graph([a]).digest_of(a)]
    for value in range(1, 12):  # new digests both above and below the old one
        a.config.value = value
        with pytest.raises(GraphError, match="its config changed"):
            node.identity_bytes


@pytest.mark.parametrize("override, error", [("/abs/out", "is absolute"), ("gs://bucket/out", "is absolute"),
                                             ("a/../b", "override_output_path")])
def test_an_absolute_or_unsafe_override_output_path_is_a_graph_error(override, error):
    with pytest.raises(GraphError, match=error):
        build_graph([ExecutorStep("a", fn, Cfg(), override_output_path=override)])


def test_a_clash_names_both_steps_by_sixteen_hex_and_nested_outputs_are_refused():
    a = ExecutorStep("a", fn, Cfg(value=1), override_output_path="shared/out")
    b = ExecutorStep("b", fn, Cfg(value=2), override_output_path="shared/out")
    with pytest.raises(GraphError) as clash:
        build_graph([a, b])
    import re

    assert re.fullmatch(r"steps 'a' \([0-9a-f]{16}…\) and 'b' \([0-9a-f]{16}…\) differ .*", str(clash.value))
    outer = ExecutorStep("outer", fn, Cfg(), override_output_path="p")
    inner = ExecutorStep("inner", fn, Cfg(), override_output_path="p/q")
    other = ExecutorStep("other", fn, Cfg(), override_output_path="z")
    for steps in ([outer, inner], [outer, inner, other]):
        with pytest.raises(GraphError, match=r"'p/q' \('inner'\) lies inside 'p' \('outer'\)"):
            build_graph(steps)


def test_each_step_knows_its_own_mirrored_inputs_and_not_those_of_the_steps_it_reads():
    """Found while hashing: a mirrored input met while a dependency is being digested (from inside
    the reading step's walk) is the dependency's; the reader's own come before and after it."""
    from executor import mirrored

    raw = ExecutorStep("raw", fn, Cfg(nested={"in": mirrored("s3://corpus/raw")}))
    mid = ExecutorStep("mid", fn, Cfg(deps=[mirrored("s3://corpus/a"), output_path_of(raw), mirrored("s3://corpus/b"),
                                            mirrored("s3://corpus/a")]))
    top = ExecutorStep("top", fn, Cfg(deps=[output_path_of(mid)]))
    nodes = build_graph([top]).nodes.values()
    assert {n.name: n.mirrored for n in nodes} == {
        "raw": ("s3://corpus/raw",), "mid": ("s3://corpus/a", "s3://corpus/b"), "top": ()}


@dataclass(frozen=True)
class _TagEntry:  # what a prefix's tag points at: the two fields of executor.tools.tags.TagEntry the graph reads
    digest: str
    output_rel: str


def test_a_tag_is_looked_up_once_its_digest_hashed_and_its_readers_documents_encoded_again():
    """output_of_tag(...) is resolved through the graph's tag lookup, once per tag per graph: the
    tagged digest is in each reader's id (a moved tag is a new id), each node names the tags its
    own config reads (not those of the steps it reads, nor of its readers), and a reader's identity
    document, encoded again, still matches its id."""
    from executor import output_of_tag

    asked: list[str] = []
    pointing = {"corpus/raw@v1": _TagEntry("a" * 64, "raw-aaaa")}

    def lookup(tag: str):
        asked.append(tag)
        return pointing.get(tag)

    def readers():
        return (ExecutorStep("reader", fn, Cfg(nested={"in": output_of_tag("corpus/raw@v1", "data.txt")})),
                ExecutorStep("other", fn, Cfg(deps=[output_of_tag("corpus/raw@v1")], value=1)),
                ExecutorStep("plain", fn, Cfg(value=2)))

    def graph_of(reader, other, plain):  # "user" reads "other": other's tag is met inside user's walk
        return build_graph([ExecutorStep("user", fn, Cfg(deps=[output_path_of(other)])), reader, plain], tags=lookup)

    graph = graph_of(*readers())
    assert asked == ["corpus/raw@v1"]
    by_name = {n.name: n for n in graph.nodes.values()}
    assert {name: n.tagged for name, n in by_name.items()} == {
        "user": (), "reader": ("corpus/raw@v1",), "other": ("corpus/raw@v1",), "plain": ()}
    assert by_name["reader"].tags["corpus/raw@v1"].output_rel == "raw-aaaa"
    assert by_name["reader"].identity["config"]["fields"]["nested"]["dict"]["in"] == {
        "digest": "a" * 64, "sub": "data.txt", "tag": "corpus/raw@v1"}
    assert by_name["other"].identity["config"]["fields"]["deps"] == [{"digest": "a" * 64, "sub": None, "tag": "corpus/raw@v1"}]

    pointing["corpus/raw@v1"] = _TagEntry("b" * 64, "raw-bbbb")  # the tag moved
    moved = {n.name: n.digest for n in graph_of(*readers()).nodes.values()}
    assert asked == ["corpus/raw@v1", "corpus/raw@v1"]  # a new graph asks again: nothing cached across graphs
    assert moved["plain"] == by_name["plain"].digest
    assert all(moved[name] != by_name[name].digest for name in ("reader", "other", "user"))  # user reads other


def test_a_tag_the_lookup_does_not_know_or_no_lookup_at_all_is_an_encoding_error_naming_the_tag():
    from executor import output_of_tag

    reader = ExecutorStep("reader", fn, Cfg(nested={"in": output_of_tag("corpus/raw@v9")}))
    with pytest.raises(ConfigEncodingError, match=r"no tag 'corpus/raw@v9' under the prefix: create it with `stepgraph tag STEP"):
        build_graph([reader], tags=lambda tag: None)
    with pytest.raises(ConfigEncodingError, match=r"output_of_tag\('corpus/raw@v9'\) is resolved from the prefix's tags"):
        build_graph([reader])


class _Walked:
    """A config value whose registered encoding counts how often the walk starts encoding a step's
    config, and refuses past a bound no walk that ends reaches: a walk that loses its place fails
    here, at once, instead of running until a clock stops it."""

    encoded = 0
    bound = 0


def _count_walks(value: _Walked) -> str:
    _Walked.encoded += 1
    if _Walked.encoded > _Walked.bound:
        raise RuntimeError(f"the walk encoded step configs {_Walked.encoded} times: it does not end")
    return "walked"


@dataclass
class _WalkedCfg:  # deliberately mutable (a cycle); `a_walked` sorts before `deps`: encoded on every visit
    a_walked: _Walked
    deps: list


@pytest.mark.parametrize("closing", [79, 47, 20])  # the loop closes at the top, or deep inside the chain
def test_a_cycle_through_steps_set_aside_more_than_once_is_named_in_a_bounded_walk(closing):
    """An 80-step chain is set aside at every 32 nested steps (MAX_NESTED_STEPS), twice on the way
    down; each step set aside stays on the path, so a cycle through it is named, and the walk
    encodes each step's config a bounded number of times (here: at most 10 each)."""
    register_encoding(_Walked, _count_walks)
    steps = [ExecutorStep("s0", fn, _WalkedCfg(_Walked(), []))]
    for i in range(1, 80):
        steps.append(ExecutorStep(f"s{i}", fn, _WalkedCfg(_Walked(), [output_path_of(steps[-1])])))
    _Walked.encoded, _Walked.bound = 0, 10 * len(steps)
    graph = build_graph([steps[-1]])  # no cycle yet: every step digested, each config encoded a few times
    assert len(graph.nodes) == 80 and _Walked.encoded <= 4 * len(steps)
    steps[0].config.deps[:] = [output_path_of(steps[closing])]
    _Walked.encoded = 0
    with pytest.raises(GraphError, match="dependency cycle: ") as cycle:
        build_graph([steps[-1]])
    named = str(cycle.value).removeprefix("dependency cycle: ").split(" -> ")
    assert set(named) == {f"s{i}" for i in range(closing + 1)} and named[0] == named[-1]
