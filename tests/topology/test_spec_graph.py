"""GraphSpec reading/writing and Graph validation, structure and metrics."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from societas.agents.llm.base import SamplingParams
from societas.topology.errors import SpecError, format_path
from societas.topology.graph import Graph, GraphMetrics, topological_layers_of
from societas.topology.spec import EdgeSpec, GraphSpec, NodeSpec

DEBATE_YAML = """
name: debate
description: two solvers argue, an aggregator decides
llms: {default: embedded, big: "hf:some/model"}
nodes:
  - {id: a, role: solver, params: {temperature: 0.3, stop: "###"}}
  - id: b
    role: critic
    prompt: |
      You disagree with everything.
      Be brief.
    llm: big
  - {id: agg, role: aggregator, template: "Task: {task}\\n\\n{inputs}", meta: {trait: calm}}
  - {id: score, kind: function, function: "mypkg.scoring:score"}
edges:
  - a -> b
  - [b, a]
  - {source: a, target: agg}
  - {source: b, target: agg, label: arguments}
  - agg -> score
rounds: 3
final: agg
budget: {max_tokens: 5000, max_calls: 40}
meta: {paper: societies of thought, seeds: [1, 2]}
"""


def _err(fn, *args, **kwargs) -> SpecError:
    with pytest.raises(SpecError) as info:
        fn(*args, **kwargs)
    return info.value


def _nodes(*ids: str) -> list[dict]:
    return [{"id": i, "role": "solver"} for i in ids]


# -- errors -------------------------------------------------------------------


def test_spec_error_carries_path_and_message_and_pickles():
    e = SpecError("nodes[2].llm", "unknown LLM 'big' (known: default)")
    assert str(e) == "nodes[2].llm: unknown LLM 'big' (known: default)"
    assert (e.path, e.message) == ("nodes[2].llm", "unknown LLM 'big' (known: default)")
    assert isinstance(e, ValueError)
    assert str(SpecError("", "empty")) == "empty"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is SpecError and str(again) == str(e)


def test_format_path():
    assert format_path(("nodes", 1, "kind")) == "nodes[1].kind"
    assert format_path(()) == ""
    assert format_path(("llms", "a b")) == "llms['a b']"


# -- round trips ----------------------------------------------------------------


def test_yaml_and_json_round_trip_exactly():
    spec = GraphSpec.from_yaml_text(DEBATE_YAML)
    assert spec.nodes[0].params == {"temperature": 0.3, "stop": ["###"]}
    assert spec.edges[1] == EdgeSpec(source="b", target="a")
    assert spec.edges[3].label == "arguments"
    assert GraphSpec.from_yaml_text(spec.to_yaml()) == spec
    assert GraphSpec.from_json_text(spec.to_json()) == spec
    assert GraphSpec.model_validate(spec.to_dict()) == spec
    # Multi-line prompts are written as literal blocks, unlabelled edges in short form.
    text = spec.to_yaml()
    assert "prompt: |" in text and "- a -> b" in text
    assert json.loads(spec.to_json())["edges"][0] == {"source": "a", "target": "b", "label": None}


def test_minimal_spec_defaults_and_compact_yaml():
    spec = GraphSpec.from_yaml_text("nodes: [{id: x, role: solver}]")
    assert spec.name == "graph" and spec.llms == {"default": "embedded"} and spec.edges == []
    assert spec.rounds is None and spec.final is None and spec.budget.max_tokens is None
    assert spec.to_yaml() == "name: graph\nnodes:\n- id: x\n  role: solver\n"


def test_files_by_suffix(tmp_path: Path):
    spec = GraphSpec.from_yaml_text(DEBATE_YAML)
    y = spec.save(tmp_path / "sub" / "g.yaml")
    j = spec.save(tmp_path / "g.json")
    assert GraphSpec.from_file(y) == spec == GraphSpec.from_file(j)
    assert GraphSpec.from_yaml_file(str(y)) == spec and GraphSpec.from_json_file(str(j)) == spec
    assert Graph.from_file(y).spec == spec
    assert Graph.from_yaml_file(y).spec == spec and Graph.from_json_file(j).spec == spec
    assert "cannot tell the format" in str(_err(GraphSpec.from_file, tmp_path / "g.txt"))
    assert _err(GraphSpec.from_yaml_file, tmp_path).message.startswith(f"cannot read {str(tmp_path)!r}")


def test_files_and_texts_are_never_confused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    missing = str(tmp_path / "nope.yaml")
    for read in (
        GraphSpec.from_yaml_file,
        GraphSpec.from_json_file,
        Graph.from_yaml_file,
        GraphSpec.from_file,
    ):
        with pytest.raises(FileNotFoundError, match="nope.yaml"):
            read(missing)
    # YAML text handed to the file method is a (missing) file name, not a document.
    with pytest.raises(FileNotFoundError, match=r"nodes: \[\{id: a"):
        Graph.from_yaml_file("nodes: [{id: a, role: solver}]")

    assert [n.id for n in GraphSpec.from_yaml_text("nodes: [{id: a, role: solver}]").nodes] == ["a"]
    assert Graph.from_json_text('{"nodes": [{"id": "b", "role": "solver"}]}').nodes == ["b"]

    # An existing file's name handed to the text methods is not read: it is a
    # YAML/JSON string, rejected with a pointer to the file method.
    GraphSpec.from_yaml_text(DEBATE_YAML).save(tmp_path / "real.yaml")
    monkeypatch.chdir(tmp_path)
    e = _err(GraphSpec.from_yaml_text, "real.yaml")
    assert e.message == (
        "expected YAML text, got the string 'real.yaml', which looks like a file name; "
        "read files with from_yaml_file"
    )
    assert "from_yaml_file" in _err(Graph.from_yaml_text, str(tmp_path / "real.yaml")).message
    assert "must be a mapping" in _err(GraphSpec.from_yaml_text, "real").message
    assert "from_json_file" in _err(GraphSpec.from_json_text, '"real.json"').message
    with pytest.raises(
        TypeError, match="expected YAML text \\(str\\), got PosixPath; read a file with from_yaml_file"
    ):
        GraphSpec.from_yaml_text(tmp_path / "real.yaml")


# -- schema errors with paths -------------------------------------------------------


@pytest.mark.parametrize(
    "text, path, fragment",
    [
        (
            "nodes: [{id: a, kind: agnt}]",
            "nodes[0].kind",
            "'agent', 'function', 'tool', 'interrupt' or 'graph'",
        ),
        (
            "nodes: [{id: a, role: solver}, {id: b, rol: solver}]",
            "nodes[1].rol",
            "unknown field (allowed: id, kind",
        ),
        ("nodes: [{id: 'a b', role: solver}]", "nodes[0].id", "invalid node id 'a b'"),
        ("nodes: [{id: a, params: {n: 2}}]", "nodes[0].params.n", "unknown sampling parameter"),
        (
            "nodes: [{id: a, params: {temperature: -1}}]",
            "nodes[0].params.temperature",
            "greater than or equal to 0",
        ),
        ("nodes: [{id: a, params: {top_p: 2}}]", "nodes[0].params.top_p", "less than or equal to 1"),
        (
            "nodes: [{id: a, template: 'Do {thing}'}]",
            "nodes[0].template",
            "unknown template placeholder {thing}",
        ),
        ("nodes: [{id: a, template: 'unbalanced {'}]", "nodes[0].template", "invalid template"),
        ("nodes: [{id: a, kind: function, function: 'not a ref!'}]", "nodes[0].function", "invalid function"),
        ("nodes: [{id: a}]\nedges: ['a -> b -> c']", "edges[0]", "must look like 'a -> b'"),
        ("nodes: [{id: a}]\nedges: [[a, b, c]]", "edges[0]", "2 items"),
        ("nodes: [{id: a}]\nedges: [{source: a}]", "edges[0].target", "missing required field"),
        ("nodes: [{id: a}]\nrounds: 0", "rounds", "greater than or equal to 1"),
        ("nodes: [{id: a}]\nrounds: yes", "rounds", "valid integer"),
        ("nodes: [{id: a}]\nbudget: {max_tokens: 0}", "budget.max_tokens", "greater than 0"),
        ("nodes: [{id: a}]\nbudget: {max_token: 5}", "budget.max_token", "allowed: max_tokens, max_calls"),
        ("nodes: [{id: a}]\nllms: {default: 3}", "llms.default", "valid string"),
        ("nodes: [{id: a, meta: {1: 2}}]", "nodes[0].meta[1]", "invalid key"),
        ("name: x", "nodes", "missing required field"),
        ("nodes: 5", "nodes", "valid list"),
    ],
)
def test_schema_errors_name_the_field(text: str, path: str, fragment: str):
    e = _err(GraphSpec.from_yaml_text, text)
    assert e.path == path, str(e)
    assert fragment in e.message, str(e)


def test_several_errors_are_reported_together():
    e = _err(GraphSpec.from_yaml_text, "nodes: [{id: a, kind: x}, {id: 1}]")
    assert e.path == "nodes[0].kind"
    assert "also 1 more error: nodes[1].id: Input should be a valid string" in e.message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("- just\n- a list", "must be a mapping"),
        ("", "got nothing"),
        ("nodes: [", "YAML syntax error at line 1, column 9"),
        ("nodes: []\nnodes: []", "YAML syntax error at line 2, column 1: found duplicate key 'nodes'"),
        ("nodes: !!python/object/apply:os.system [ls]", "could not determine a constructor"),
        ("nodes: [" * 200, "nested too deeply"),
        ("x: 2001-13-45\nnodes: []", "month must be in 1..12"),
    ],
)
def test_document_errors(text: str, fragment: str):
    e = _err(GraphSpec.from_yaml_text, text)
    assert e.path == ""
    assert fragment in e.message, str(e)


def test_json_errors():
    assert "JSON syntax error at line 1" in str(_err(GraphSpec.from_json_text, '{"nodes": [}'))
    assert _err(GraphSpec.from_json_text, '{"nodes": [{"id": "a", "kind": 1}]}').path == "nodes[0].kind"
    assert "must be a mapping" in str(_err(GraphSpec.from_json_text, "[1, 2]"))


def test_alias_bomb_is_rejected_quickly():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for prev, cur in zip("abcdefg", "bcdefgh", strict=True):
        bomb += f"{cur}: &{cur} [{', '.join(['*' + prev] * 10)}]\n"
    bomb += "nodes: []\nmeta: {bomb: *h}\n"
    assert "too large" in str(_err(GraphSpec.from_yaml_text, bomb))


def test_node_sampling_and_template_helpers():
    node = NodeSpec(
        id="a", role="solver", params={"temperature": 0.0, "max_new_tokens": 12}, template="{task}|{inputs}"
    )
    sp = node.sampling(SamplingParams(top_p=0.5))
    assert (sp.temperature, sp.max_new_tokens, sp.top_p) == (0.0, 12, 0.5)
    assert NodeSpec(id="b", role="solver").sampling() == SamplingParams()
    assert node.render_template("T", "I") == "T|I"
    assert NodeSpec(id="c", role="solver").render_template("T", "I") is None


# -- graph validation -------------------------------------------------------------


@pytest.mark.parametrize(
    "text, path, message",
    [
        ("nodes: []", "nodes", "a graph needs at least one node"),
        (
            "nodes: [{id: x, role: solver}, {id: y, role: solver}, {id: z, role: solver}, {id: x, role: solver}]",
            "nodes[3].id",
            "duplicate id 'x' (first at nodes[0])",
        ),
        ("nodes: [{id: a, role: solver}]\nedges: [a -> y]", "edges[0].target", "unknown node 'y'"),
        ("nodes: [{id: a, role: solver}]\nedges: [q -> a]", "edges[0].source", "unknown node 'q'"),
        ("nodes: [{id: a, role: solver, llm: big}]", "nodes[0].llm", "unknown LLM 'big' (known: default)"),
        ("nodes: [{id: a}]", "nodes[0].role", "an agent node needs a role"),
        (
            "nodes: [{id: t, kind: tool}]",
            "nodes[0].function",
            "a tool node needs a function ('module:attr' or a name given to the Runtime)",
        ),
        ("nodes: [{id: f, kind: function}]", "nodes[0].function", "a function node needs a function"),
        (
            "nodes: [{id: a, role: solver}, {id: b, role: solver}]\nedges: [a -> b, b -> a]",
            "rounds",
            "the graph has a cycle (a -> b -> a) but declares no rounds",
        ),
        ("nodes: [{id: a, role: solver}]\nedges: [a -> a]", "rounds", "the graph has a cycle (a -> a)"),
        ("nodes: [{id: a, role: solver}]\nfinal: z", "final", "unknown node 'z'"),
        (
            "nodes: [{id: a, role: solver}, {id: b, role: solver}]\nedges: [a -> b, c -> a, [a, b]]",
            "edges[1].source",
            "unknown node 'c'",
        ),
        (
            "nodes: [{id: a, role: solver}, {id: b, role: solver}]\nedges: [a -> b, [a, b]]",
            "edges[1]",
            "duplicate edge 'a -> b' (first at edges[0])",
        ),
    ],
)
def test_graph_validation_errors(text: str, path: str, message: str):
    e = _err(Graph.from_yaml_text, text)
    assert e.path == path, str(e)
    assert message in e.message, str(e)


def test_unknown_role_lists_known_roles_and_custom_roles_need_a_prompt():
    e = _err(Graph.from_yaml_text, "nodes: [{id: a, role: wizard}]")
    assert e.path == "nodes[0].role"
    assert e.message.startswith("unknown role 'wizard' (known: aggregator, algorithmic,")
    g = Graph.from_yaml_text("nodes: [{id: a, role: wizard, prompt: You cast spells.}]")
    assert g.node("a").role == "wizard"
    # A caller may narrow the role list.
    g2 = Graph.from_yaml_text("nodes: [{id: a, role: solver}]")
    with pytest.raises(SpecError, match="unknown role 'solver' \\(known: coder\\)"):
        g2.validate(known_roles=["coder"])


def test_validate_false_skips_semantics_but_not_structure():
    g = Graph.from_yaml_text("nodes: [{id: a, role: wizard}]", validate=False)
    assert g.nodes == ["a"]
    with pytest.raises(SpecError, match="duplicate id"):
        Graph.from_yaml_text("nodes: [{id: a}, {id: a}]", validate=False)


def test_graph_copies_its_spec():
    spec = GraphSpec.from_yaml_text("nodes: [{id: a, role: solver}]")
    g = Graph(spec)
    spec.nodes[0].role = "coder"
    assert g.node("a").role == "solver"
    assert g.to_spec() == g.spec and g.to_spec() is not g.spec


# -- structure ------------------------------------------------------------------


def test_graph_basics_on_the_debate():
    g = Graph.from_yaml_text(DEBATE_YAML)
    assert g.nodes == ["a", "b", "agg", "score"]
    assert g.edges == [("a", "b"), ("b", "a"), ("a", "agg"), ("b", "agg"), ("agg", "score")]
    assert g.predecessors("agg") == ["a", "b"] and g.successors("a") == ["b", "agg"]
    assert g.nx.nodes["b"]["spec"] is g.node("b")
    assert g.final == "agg"  # declared, though "score" is the sink
    assert g.is_cyclic and g.cyclic_components() == [{"a", "b"}]
    assert g.topological_layers() == [["a", "b"], ["agg"], ["score"]]
    assert g.metrics() == GraphMetrics(nodes=4, edges=5, depth=3, density=5 / 12)
    assert g.edge("b", "agg").label == "arguments"
    assert "a" in g and len(g) == 4 and list(g) == g.nodes
    with pytest.raises(KeyError, match="unknown node 'zz'"):
        g.node("zz")


def test_neighbours_follow_node_declaration_order():
    # Edges are declared x-first, nodes y-first: node order wins.
    g = Graph.build("fan", _nodes("z", "y", "x"), [("x", "z"), ("y", "z")])
    assert g.predecessors("z") == ["y", "x"]
    assert g.successors("x") == ["z"] and g.predecessors("x") == []
    g2 = Graph.build("fan_out", _nodes("hub", "q", "p"), [("hub", "p"), ("hub", "q")])
    assert g2.successors("hub") == ["q", "p"]


def test_chain_metrics():
    g = Graph.build("chain", _nodes("a", "b", "c"), [("a", "b"), ("b", "c")])
    m = g.metrics()
    assert (m.nodes, m.edges, m.depth) == (3, 2, 3)
    assert m.density == pytest.approx(2 / 6)
    assert m.to_dict() == {"nodes": 3, "edges": 2, "depth": 3, "density": pytest.approx(1 / 3)}
    assert g.final == "c" and not g.is_cyclic and g.cyclic_components() == []
    assert g.topological_layers() == [["a"], ["b"], ["c"]]


def test_star_metrics_and_final():
    leaves = ["l1", "l2", "l3", "l4"]
    g = Graph.build("star", _nodes("hub", *leaves), [("hub", leaf) for leaf in leaves])
    assert g.metrics() == GraphMetrics(nodes=5, edges=4, depth=2, density=4 / 20)
    assert g.topological_layers() == [["hub"], leaves]
    # Four sinks: the final node is the last one in topological (then declaration) order.
    assert g.sinks() == leaves and g.final == "l4"
    gather = Graph.build("gather", _nodes(*leaves, "hub"), [(leaf, "hub") for leaf in leaves])
    assert gather.final == "hub" and gather.sources() == leaves


def test_single_node_and_empty_metrics():
    g = Graph.build("one", _nodes("only"))
    assert g.metrics() == GraphMetrics(nodes=1, edges=0, depth=1, density=0.0)
    assert g.final == "only"
    empty = Graph(GraphSpec(nodes=[]), validate=False)
    assert empty.metrics() == GraphMetrics(nodes=0, edges=0, depth=0, density=0.0)
    assert empty.topological_layers() == []


def test_longest_path_layering_and_cycles_sharing_a_layer():
    # a -> b -> d and a -> d: d sits after b (longest path), not next to b.
    # c <-> e is a cycle fed by b: c and e share one layer.
    g = Graph.build(
        "mixed",
        _nodes("a", "b", "c", "d", "e"),
        [("a", "b"), ("b", "d"), ("a", "d"), ("b", "c"), ("c", "e"), ("e", "c"), ("e", "d")],
        rounds=2,
    )
    assert g.topological_layers() == [["a"], ["b"], ["c", "e"], ["d"]]
    assert g.cyclic_components() == [{"c", "e"}]
    assert g.metrics().depth == 4
    assert g.final == "d"


def test_debate_with_self_loop_is_a_cyclic_component():
    g = Graph.build("self", _nodes("a", "b"), [("a", "a"), ("a", "b")], rounds=2)
    assert g.cyclic_components() == [{"a"}]
    assert g.topological_layers() == [["a"], ["b"]]
    assert g.sinks() == ["b"]


def test_cyclic_graph_without_sink_picks_last_declared():
    g = Graph.build("ring", _nodes("a", "b", "c"), [("a", "b"), ("b", "c"), ("c", "a")], rounds=2)
    assert g.topological_layers() == [["a", "b", "c"]]
    assert g.final == "c" and g.metrics().depth == 1


def test_topological_layers_of_plain_digraph():
    import networkx as nx

    dg = nx.DiGraph([("x", "y"), ("w", "y")])
    assert topological_layers_of(dg, ["w", "x", "y"]) == [["w", "x"], ["y"]]
    assert topological_layers_of(nx.DiGraph()) == []


def test_subgraph_prunes_edges_keeps_nodes_and_final():
    g = Graph.build("d", _nodes("a", "b", "c", "d"), [("a", "b"), ("a", "c", "fast"), ("b", "d"), ("c", "d")])
    sub = g.subgraph({("a", "c"), ("c", "d")})
    assert sub.nodes == g.nodes
    assert sub.edges == [("a", "c"), ("c", "d")]
    assert sub.edge("a", "c").label == "fast"
    assert sub.final == "d" and sub.spec.final == "d"
    assert g.edges == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]  # untouched
    # Dropping every edge leaves four sinks; the final node is still pinned to d.
    assert g.subgraph(set()).final == "d"
    with pytest.raises(SpecError, match="cannot keep edge d -> a"):
        g.subgraph({("d", "a")})


def test_copy_and_yaml():
    g = Graph.from_yaml_text(DEBATE_YAML)
    c = g.copy()
    assert c.spec == g.spec and c is not g and c.spec is not g.spec
    assert Graph.from_yaml_text(g.to_yaml()).spec == g.spec


def test_build_accepts_every_edge_form_and_reports_paths():
    g = Graph.build(
        "forms",
        [NodeSpec(id="a", role="solver"), {"id": "b", "role": "solver"}, {"id": "c", "role": "solver"}],
        [("a", "b"), "b -> c", {"source": "a", "target": "c", "label": "skip"}],
        final="c",
    )
    assert g.edges == [("a", "b"), ("b", "c"), ("a", "c")]
    assert _err(Graph.build, "x", [{"id": "a", "kind": "bad"}]).path == "nodes[0].kind"
    assert _err(Graph.build, "x", _nodes("a"), ["a"]).path == "edges[0]"
    assert _err(Graph.build, "x", _nodes("a"), rounds=0).path == "rounds"
