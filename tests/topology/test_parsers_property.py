"""Property tests: whatever text comes in, the parsers answer with a result or a documented error.

``parse_layered_yaml`` may only raise its four parse errors and
``GraphSpec.from_yaml_text``/``Graph`` only ``SpecError``, never a TypeError,
KeyError or RecursionError (how fast an alias bomb is refused is measured in
``benchmarks/runtime_batching.py``, not asserted here). Inputs are
random text, random YAML documents built from the keys the parsers know, and
valid documents broken by targeted mutations. What parses must also be
sound: a parsed topology satisfies every logic rule and converts to a valid
Graph; a valid spec round-trips through YAML and JSON.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import networkx as nx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from societas.topology.errors import LogicInvalid, NoYAMLFound, SchemaInvalid, SpecError, YAMLSyntaxError
from societas.topology.graph import Graph
from societas.topology.layered import LayeredTopology, extract_yaml, parse_layered_yaml
from societas.topology.spec import GraphSpec

PARSE_ERRORS = (NoYAMLFound, YAMLSyntaxError, SchemaInvalid, LogicInvalid)
SETTINGS = settings(
    max_examples=300,
    # No per-example deadline: wall-clock limits fail at random on a loaded machine.
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROLES = ["retrieval", "planning", "algorithmic", "coding", "debugging", "testing"]
VOCAB = [
    "layers", "name", "id", "role", "ref", "refs", "agents", "difficulty", "easy", "hard",
    "nodes", "edges", "kind", "llm", "llms", "source", "target", "rounds", "final", "params",
    "function", "template", "budget", "max_tokens", "temperature", "meta", "prompt",
    "agent", "tool", "default", "solver", "a", "b", "t", "a -> b", "[", "{task}",
    *ROLES,
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(VOCAB)
)
keys = st.sampled_from(VOCAB) | st.text(max_size=8)
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
    max_leaves=30,
)
yamlish_text = st.lists(
    st.sampled_from(list("ab:-[]{}`\n #&*!|>'\",?%@\t") + ["layers:", "```yaml\n", "```\n", "- - ", "\n  - "])
    | st.characters(),
    max_size=120,
).map("".join)


def _check_topology(t: LayeredTopology) -> None:
    """Every logic rule holds for a topology the parser accepted, and it converts to a valid Graph."""
    names = [a.name for a in t.agents]
    assert len(names) == len(set(names))
    assert len(t.layers[-1]) == 1 and all(t.layers)
    for i, layer in enumerate(t.layers):
        for a in layer:
            assert a.role in ROLES
            assert all(t.layer_of(r) < i for r in a.ref)
    g = t.to_graph()
    assert g.final == t.final
    assert not g.is_cyclic
    for n in g.nodes:
        assert n == g.final or nx.has_path(g.nx, n, g.final)
    assert t.metrics().depth == len(t.layers)
    assert t.metrics().nodes == len(g) and t.metrics().edges == len(g.edges)


def _parse_layered(text: str) -> None:
    try:
        t = parse_layered_yaml(text)
    except PARSE_ERRORS as exc:
        assert type(exc) in PARSE_ERRORS
        _check_error(exc)
        return
    _check_topology(t)


def _parse_spec(text: str) -> None:
    try:
        spec = GraphSpec.from_yaml_text(text)
    except SpecError as exc:
        _check_error(exc)
        return
    try:
        g = Graph(spec)
    except SpecError as exc:
        _check_error(exc)
        return
    assert GraphSpec.from_yaml_text(spec.to_yaml()) == spec
    assert GraphSpec.from_json_text(spec.to_json()) == spec
    ids = [n.id for n in spec.nodes]
    assert g.nodes == ids
    m = g.metrics()
    assert (m.nodes, m.edges) == (len(ids), len(g.edges))
    layers = g.topological_layers()
    assert sorted(n for layer in layers for n in layer) == sorted(ids)
    if not g.is_cyclic:
        assert m.depth == len(layers)
    assert g.final in g


def _check_error(exc: SpecError) -> None:
    """A refusal names its place and says what is wrong, in the documented form."""
    assert isinstance(exc.path, str) and exc.message.strip()
    assert str(exc) == (f"{exc.path}: {exc.message}" if exc.path else exc.message)


def _dump(doc: Any, style: int) -> str:
    text = yaml.safe_dump(doc, default_flow_style=[False, True, None][style % 3], sort_keys=False)
    return text


def _wrap(text: str, how: int) -> str:
    return [text, f"```yaml\n{text}```", f"Here is the plan.\n```\n{text}\n```\nDone.", f"Plan:\n{text}"][
        how % 4
    ]


# -- layered YAML -----------------------------------------------------------------


@SETTINGS
@given(yamlish_text)
def test_layered_random_text(text: str):
    _parse_layered(text)
    try:
        block = extract_yaml(text)
    except NoYAMLFound as exc:
        # the parser's first stage is this extraction, so it refuses the same way
        with pytest.raises(NoYAMLFound, match="^" + re.escape(str(exc)) + "$"):
            parse_layered_yaml(text)
    else:
        assert block.strip()


@SETTINGS
@given(documents, st.integers(0, 2), st.integers(0, 3), st.sampled_from([None, "layers", "top"]))
def test_layered_random_documents(doc: Any, style: int, how: int, embed: str | None):
    if embed == "layers":
        doc = {"layers": doc}
    elif embed == "top" and isinstance(doc, dict):
        doc = {"difficulty": "easy", **doc}
    _parse_layered(_wrap(_dump(doc, style), how))


@st.composite
def valid_layered(draw) -> dict[str, Any]:
    """A valid layered document: every agent reads earlier ones and reaches the final agent."""
    n_layers = draw(st.integers(1, 4))
    layers: list[list[dict[str, Any]]] = []
    names: list[list[str]] = []
    for i in range(n_layers):
        width = 1 if i == n_layers - 1 else draw(st.integers(1, 3))
        layer_names = [f"agent_{i}_{j}" for j in range(width)]
        earlier = [n for ns in names for n in ns]
        layer = []
        for name in layer_names:
            refs = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)) if earlier else []
            layer.append({"name": name, "role": draw(st.sampled_from(ROLES)), "ref": refs})
        layers.append(layer)
        names.append(layer_names)
    # Make every non-final agent reach the final one: the next layer's first agent reads it.
    for i in range(n_layers - 1):
        reader = layers[i + 1][0]
        for a in layers[i]:
            if a["name"] not in reader["ref"]:
                reader["ref"].append(a["name"])
    doc: dict[str, Any] = {"layers": layers}
    if draw(st.booleans()):
        doc["difficulty"] = draw(st.sampled_from(["easy", "medium", "hard"]))
    return doc


@SETTINGS
@given(valid_layered(), st.integers(0, 2), st.integers(0, 3))
def test_valid_layered_documents_parse(doc: dict[str, Any], style: int, how: int):
    t = parse_layered_yaml(_wrap(_dump(doc, style), how))
    assert [[a.name for a in layer] for layer in t.layers] == [
        [a["name"] for a in layer] for layer in doc["layers"]
    ]
    assert [[a.ref for a in layer] for layer in t.layers] == [
        [a["ref"] for a in layer] for layer in doc["layers"]
    ]
    assert t.difficulty == doc.get("difficulty")
    _check_topology(t)
    assert parse_layered_yaml(t.to_yaml()) == t


def _agent_slots(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        return []
    out = []
    for layer in doc["layers"]:
        agents = layer.get("agents") if isinstance(layer, dict) else layer
        if isinstance(agents, list):
            out.extend(a for a in agents if isinstance(a, dict))
    return out


@st.composite
def mutated_layered(draw) -> Any:
    doc = copy.deepcopy(draw(valid_layered()))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 11))
        agents = _agent_slots(doc)
        layers = doc.get("layers") if isinstance(doc, dict) else None
        if op == 0 and agents:  # drop a key
            a = draw(st.sampled_from(agents))
            if a:
                a.pop(draw(st.sampled_from(sorted(a))))
        elif op == 1 and agents:  # change a value's type
            a = draw(st.sampled_from(agents))
            a[draw(st.sampled_from(["name", "role", "ref", "id", "refs", "extra"]))] = draw(documents)
        elif op == 2 and isinstance(layers, list):  # shuffle layers
            doc["layers"] = draw(st.permutations(layers))
        elif op == 3 and agents:  # inject a ref (maybe self, same layer, later, unknown)
            a = draw(st.sampled_from(agents))
            names = [b.get("name") for b in agents if isinstance(b.get("name"), str)] + ["ghost"]
            refs = a.get("ref") if isinstance(a.get("ref"), list) else []
            a["ref"] = [*refs, draw(st.sampled_from(names))]
        elif op == 4 and agents and isinstance(layers, list):  # duplicate an agent into some layer
            target = draw(st.sampled_from(layers))
            if isinstance(target, list):
                target.append(copy.deepcopy(draw(st.sampled_from(agents))))
        elif op == 5 and agents:  # unknown role
            draw(st.sampled_from(agents))["role"] = draw(st.sampled_from(["wizard", "", "Coding", "coder"]))
        elif op == 6 and isinstance(layers, list) and layers:  # drop or empty a layer
            i = draw(st.integers(0, len(layers) - 1))
            if draw(st.booleans()):
                layers.pop(i)
            else:
                layers[i] = []
        elif op == 7 and isinstance(layers, list) and layers:  # wrap a layer as {agents: ...}
            i = draw(st.integers(0, len(layers) - 1))
            layers[i] = {"agents": layers[i]}
        elif op == 8 and isinstance(doc, dict):  # odd difficulty or unknown top-level key
            doc[draw(st.sampled_from(["difficulty", "notes"]))] = draw(scalars)
        elif op == 9 and isinstance(doc, dict):  # bare list of layers, or replace layers wholesale
            doc = doc.get("layers") if draw(st.booleans()) else {"layers": draw(documents)}
        elif op == 10 and agents:  # rename with an alias key
            a = draw(st.sampled_from(agents))
            if "name" in a:
                a["id"] = a.pop("name") if draw(st.booleans()) else a["name"]
        elif op == 11 and isinstance(layers, list):  # append an extra final agent
            layers.append(
                [
                    {
                        "name": "extra",
                        "role": "testing",
                        "ref": draw(st.lists(st.sampled_from(VOCAB), max_size=2)),
                    }
                ]
            )
    return doc


@SETTINGS
@given(mutated_layered(), st.integers(0, 2), st.integers(0, 3), st.floats(0.0, 1.0))
def test_layered_mutated_documents(doc: Any, style: int, how: int, cut: float):
    text = _wrap(_dump(doc, style), how)
    _parse_layered(text)
    # A truncated answer (the model ran out of tokens).
    _parse_layered(text[: int(len(text) * cut)])


# -- graph specs ----------------------------------------------------------------------


@SETTINGS
@given(yamlish_text | documents.map(lambda d: _dump(d, 0)) | documents.map(lambda d: _dump({"nodes": d}, 1)))
def test_graph_spec_random_input(text: str):
    _parse_spec(text)


@st.composite
def valid_spec(draw) -> dict[str, Any]:
    n = draw(st.integers(1, 6))
    ids = [f"n{i}" for i in range(n)]
    nodes: list[dict[str, Any]] = []
    for i in ids:
        kind = draw(st.sampled_from(["agent", "agent", "function"]))
        node: dict[str, Any] = {"id": i, "kind": kind}
        if kind == "agent":
            node["role"] = draw(st.sampled_from(["solver", "coder", "planning", "aggregator"]))
            if draw(st.booleans()):
                node["params"] = {
                    "temperature": draw(st.floats(0, 2)),
                    "max_new_tokens": draw(st.integers(1, 64)),
                }
            if draw(st.booleans()):
                node["prompt"] = draw(st.text(max_size=30))
            if draw(st.booleans()):
                node["meta"] = draw(st.dictionaries(st.text(max_size=5), scalars, max_size=3))
        else:
            node["function"] = "pkg.mod:fn"
        nodes.append(node)
    pairs = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), unique=True, max_size=8))
    edges: list[Any] = []
    for a, b in pairs:
        form = draw(st.integers(0, 3))
        edges.append(
            [f"{a} -> {b}", [a, b], {"source": a, "target": b}, {"source": a, "target": b, "label": "x"}][
                form
            ]
        )
    doc: dict[str, Any] = {"name": draw(st.text(max_size=10)), "nodes": nodes, "edges": edges, "rounds": 2}
    if draw(st.booleans()):
        doc["final"] = draw(st.sampled_from(ids))
    return doc


@SETTINGS
@given(valid_spec(), st.integers(0, 2))
def test_valid_specs_round_trip(doc: dict[str, Any], style: int):
    spec = GraphSpec.from_yaml_text(_dump(doc, style))
    g = Graph(spec)
    assert GraphSpec.from_yaml_text(spec.to_yaml()) == spec
    assert GraphSpec.from_json_text(spec.to_json()) == spec
    assert g.metrics().nodes == len(doc["nodes"]) and g.metrics().edges == len(doc["edges"])
    layers = g.topological_layers()
    assert sorted(n for layer in layers for n in layer) == sorted(g.nodes)
    # Layering respects every edge outside a cycle.
    where = {n: i for i, layer in enumerate(layers) for n in layer}
    cyclic = {n for comp in g.cyclic_components() for n in comp}
    for a, b in g.edges:
        if not (a in cyclic and b in cyclic and nx.has_path(g.nx, b, a)):
            assert where[a] < where[b]


@st.composite
def mutated_spec(draw) -> Any:
    doc = copy.deepcopy(draw(valid_spec()))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 6))
        nodes = (
            [n for n in doc.get("nodes") or [] if isinstance(n, dict)]
            if isinstance(doc.get("nodes"), list)
            else []
        )
        if op == 0:  # drop a top-level key
            doc.pop(draw(st.sampled_from(sorted(doc))), None)
        elif op == 1 and nodes:  # change a node field's type
            node = draw(st.sampled_from(nodes))
            node[
                draw(st.sampled_from(["id", "kind", "role", "llm", "params", "function", "template", "typo"]))
            ] = draw(documents)
        elif op == 2 and isinstance(doc.get("edges", []), list):  # edge to a missing node / malformed edge
            doc.setdefault("edges", []).append(
                draw(st.sampled_from(["n0 -> zz", "n0 ->", ["n0"], {"source": "n0"}, 5]))
            )
        elif op == 3:  # remove rounds (cycles now invalid) or set it badly
            doc["rounds"] = draw(st.sampled_from([None, 0, -1, "two", 1.5, True]))
        elif op == 4 and nodes:  # duplicate a node
            doc["nodes"].append(copy.deepcopy(nodes[0]))
        elif op == 5:  # replace a section wholesale
            doc[draw(st.sampled_from(["nodes", "edges", "llms", "budget", "meta", "final"]))] = draw(
                documents
            )
        elif op == 6 and nodes:  # unknown role or LLM
            node = draw(st.sampled_from(nodes))
            node[draw(st.sampled_from(["role", "llm"]))] = "unknown_thing"
    return doc


@SETTINGS
@given(mutated_spec(), st.integers(0, 2), st.floats(0.0, 1.0))
def test_graph_spec_mutated(doc: Any, style: int, cut: float):
    text = _dump(doc, style)
    _parse_spec(text)
    _parse_spec(text[: int(len(text) * cut)])
