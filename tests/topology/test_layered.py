"""AgentConductor layered YAML: extraction, the four failure kinds, conversion to graphs."""

from __future__ import annotations

import pytest

from societas.agents.roles import CONDUCTOR_ROLES, ROLE_PROMPTS, known_roles
from societas.topology.errors import (
    PARSE_ERROR_KINDS,
    LogicInvalid,
    NoYAMLFound,
    SchemaInvalid,
    SpecError,
    TopologyParseError,
    YAMLSyntaxError,
)
from societas.topology.graph import GraphMetrics
from societas.topology.layered import (
    DIFFICULTY_NODE_CAPS,
    LayeredAgent,
    LayeredTopology,
    extract_yaml,
    parse_layered_yaml,
    try_parse_layered_yaml,
)

VALID = """\
difficulty: medium
layers:
  - - {name: planner_1, role: planning, ref: []}
  - - {name: coder_1, role: coding, ref: [planner_1]}
    - {name: coder_2, role: coding, ref: [planner_1]}
  - - {name: tester_1, role: testing, ref: [coder_1, coder_2]}
"""

ANSWER = f"""I will plan first, then code twice, then test.

```yaml
{VALID}```

This should work."""


def _raises(kind: type[TopologyParseError], text: str, **kw) -> TopologyParseError:
    with pytest.raises(TopologyParseError) as info:
        parse_layered_yaml(text, **kw)
    assert type(info.value) is kind, f"{type(info.value).__name__}: {info.value}"
    return info.value


# -- errors ---------------------------------------------------------------------


def test_error_kinds_are_distinct_spec_errors():
    assert [c.kind for c in (NoYAMLFound, YAMLSyntaxError, SchemaInvalid, LogicInvalid)] == list(
        PARSE_ERROR_KINDS
    )
    assert PARSE_ERROR_KINDS == ("no_yaml", "yaml_syntax", "schema_invalid", "logic_invalid")
    for cls in (NoYAMLFound, YAMLSyntaxError, SchemaInvalid, LogicInvalid):
        assert (
            issubclass(cls, TopologyParseError) and issubclass(cls, SpecError) and issubclass(cls, ValueError)
        )


# -- the valid path ---------------------------------------------------------------


def test_valid_answer_parses_into_layers():
    t = parse_layered_yaml(ANSWER)
    assert t.difficulty == "medium"
    assert [[a.name for a in layer] for layer in t.layers] == [
        ["planner_1"],
        ["coder_1", "coder_2"],
        ["tester_1"],
    ]
    assert t.layers[2][0] == LayeredAgent(name="tester_1", role="testing", ref=["coder_1", "coder_2"])
    assert t.final == "tester_1"
    assert t.layer_of("coder_2") == 1
    assert t.metrics() == GraphMetrics(nodes=4, edges=4, depth=3, density=4 / 12)


def test_to_graph_has_library_roles_and_the_right_edges():
    t = parse_layered_yaml(ANSWER, llm="worker")
    g = t.to_graph(task_template="Solve: {task}\n{inputs}")
    assert g.nodes == ["planner_1", "coder_1", "coder_2", "tester_1"]
    assert sorted(g.edges) == sorted(
        [("planner_1", "coder_1"), ("planner_1", "coder_2"), ("coder_1", "tester_1"), ("coder_2", "tester_1")]
    )
    assert [g.node(n).role for n in g.nodes] == ["planner", "coder", "coder", "tester"]
    assert g.node("coder_2").meta == {"layer": 1, "conductor_role": "coding"}
    assert g.node("coder_1").llm == "worker" and g.spec.llms == {"worker": "embedded"}
    assert g.node("tester_1").template == "Solve: {task}\n{inputs}"
    assert g.final == "tester_1" and g.spec.final == "tester_1"
    assert g.spec.meta == {"source": "agentconductor", "difficulty": "medium"}
    assert g.topological_layers() == [["planner_1"], ["coder_1", "coder_2"], ["tester_1"]]
    assert g.metrics().depth == t.metrics().depth == 3


def test_orchestrator_prompt_example_parses():
    t = parse_layered_yaml(ROLE_PROMPTS["orchestrator"])
    assert [a.role for a in t.agents] == ["planning", "coding", "testing"]


def test_to_yaml_round_trips_in_the_orchestrator_format():
    t = parse_layered_yaml(ANSWER)
    text = t.to_yaml()
    assert "  - - {name: coder_1, role: coding, ref: [planner_1]}" in text
    assert parse_layered_yaml(text) == t
    # Names YAML would read as booleans or null are quoted.
    odd = LayeredTopology(
        layers=[
            [LayeredAgent(name="yes", role="coding")],
            [LayeredAgent(name="null", role="testing", ref=["yes"])],
        ]
    )
    assert parse_layered_yaml(odd.to_yaml()) == odd


def test_accepted_variants():
    text = """```yml
- agents:
    - {id: r1, role: Retrieval}
    - {id: a1, role: algorithmic, refs: null}
- - {name: d1, role: debugging, refs: "r1, a1"}
- - {name: t1, role: testing, ref: d1}
```"""
    t = parse_layered_yaml(text)
    assert t.difficulty is None
    assert [a.name for a in t.agents] == ["r1", "a1", "d1", "t1"]
    assert t.layers[0][0].role == "retrieval"  # case-insensitive, spelled as allowed
    assert t.layers[0][1].ref == []
    assert t.layers[1][0].ref == ["r1", "a1"]
    assert t.layers[2][0].ref == ["d1"]
    assert t.to_graph().edges == [("r1", "d1"), ("a1", "d1"), ("d1", "t1")]


def test_duplicate_refs_make_one_edge():
    t = parse_layered_yaml("layers:\n- - {name: a, role: coding}\n- - {name: t, role: testing, ref: [a, a]}")
    assert t.to_graph().edges == [("a", "t")]
    assert t.metrics().edges == 1


def test_custom_allowed_roles():
    text = "layers:\n- - {name: s, role: solver}\n- - {name: g, role: aggregator, ref: [s]}"
    _raises(LogicInvalid, text)
    t = parse_layered_yaml(text, allowed_roles=known_roles())
    assert t.to_graph().node("g").role == "aggregator"


# -- extraction ---------------------------------------------------------------------


def test_extract_prefers_the_last_yaml_block():
    text = "```yaml\nlayers: first\n```\nthen\n```YAML\nlayers: second\n```\n```yaml\n\n```"
    assert extract_yaml(text).strip() == "layers: second"


def test_extract_any_fence_with_layers_then_bare_section():
    text = "```python\nprint(1)\n```\n```\nlayers:\n  - - {name: t, role: testing}\n```\n```\nnot: it\n```"
    assert extract_yaml(text).startswith("layers:")
    bare = "My answer:\ndifficulty: easy\nlayers:\n  - - {name: t, role: testing}\n"
    assert extract_yaml(bare) == "difficulty: easy\nlayers:\n  - - {name: t, role: testing}\n"
    assert parse_layered_yaml(bare).difficulty == "easy"
    # An unclosed fence (a truncated answer) still yields its body.
    assert parse_layered_yaml("```yaml\nlayers:\n  - - {name: t, role: testing}\n").final == "t"
    # Indented fences are dedented.
    assert parse_layered_yaml("  ```yaml\n  layers:\n    - - {name: t, role: testing}\n  ```").final == "t"


# -- the four failure kinds -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I cannot design a topology for this.",
        "```python\nprint('layers')\n```",
        "```yaml\n   \n```",
        "the layers: are planning then coding",  # 'layers:' not at a line start
    ],
)
def test_no_yaml_found(text: str):
    e = _raises(NoYAMLFound, text)
    assert e.kind == "no_yaml"


def test_non_string_answer_is_no_yaml():
    with pytest.raises(NoYAMLFound, match="expected the answer as text, got NoneType"):
        parse_layered_yaml(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("```yaml\nlayers: [\n```", "YAML syntax error at line 1"),
        ("```yaml\nlayers:\n  - - {name: a, role: coding\n```", "YAML syntax error"),
        ("layers:\n  - - {name: t, role: testing}\nThat is my design.", "line 3"),
        ("```yaml\nHere is my plan, with three agents.\n```", "single str value"),
        ("```yaml\n42\n```", "single int value"),
        ("```yaml\n# only a comment\n```", "is empty"),
        ("```yaml\nlayers: !!python/object/apply:os.system [id]\n```", "could not determine a constructor"),
        ("```yaml\nlayers: *nowhere\n```", "undefined alias"),
        ("```yaml\nlayers: []\nlayers: []\n```", "duplicate key 'layers'"),
        ("```yaml\nlayers: " + "[" * 5000 + "\n```", "nested too deeply"),
        ("```yaml\n" + "- " * 3000 + "x\n```", "nested too deeply"),
        ("```yaml\nlayers: 1" + "1" * 5000 + "\n```", "YAML value error"),
        ("```yaml\nlayers: []\nwhen: 2024-02-30\n```", "YAML value error"),
        ("```yaml\nlayers: '" + "x" * 200_000 + "'\n```", "too long"),
    ],
)
def test_yaml_syntax_errors(text: str, fragment: str):
    e = _raises(YAMLSyntaxError, text)
    assert fragment in str(e), str(e)


def test_billion_laughs_is_refused_before_it_expands():
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    text = "```yaml\n" + "\n".join(lines) + "\nlayers: *i\n```"
    e = _raises(YAMLSyntaxError, text)
    assert "too large" in str(e)


@pytest.mark.parametrize(
    "body, path, fragment",
    [
        ("layers: 3", "layers", "must be a list of layers, got int"),
        ("layers: []", "layers", "needs at least one layer"),
        ("difficulty: easy", "layers", "missing required key"),
        ("layers: [[{name: t, role: testing}]]\ntopology: x", "topology", "unknown top-level key"),
        ("layers: [[{name: t, role: testing}]]\nMy plan: x", "['My plan']", "unknown top-level key"),
        ("layers: [[{name: t, role: testing}]]\n3: x", "", "unknown top-level key 3"),
        ("layers: [[{name: t, role: testing}]]\ndifficulty: extreme", "difficulty", "easy, medium, hard"),
        ("layers: [[{name: t, role: testing}]]\ndifficulty: 3", "difficulty", "easy, medium, hard"),
        ("layers:\n- []", "layers[0]", "at least one agent"),
        ("layers:\n- coder", "layers[0]", "must be a list of agents, got str"),
        ("layers:\n- {agents: []}", "layers[0].agents", "at least one agent"),
        ("layers:\n- {agents: [{name: t, role: testing}], tag: x}", "layers[0].tag", "holds only 'agents'"),
        ("layers:\n- {members: []}", "layers[0].members", "holds only 'agents'"),
        ("layers:\n- [coder_1]", "layers[0][0]", "must be a mapping"),
        ("layers:\n- - {name: t, role: testing, tools: [x]}", "layers[0][0].tools", "unknown key 'tools'"),
        ("layers:\n- - {role: testing}", "layers[0][0].name", "missing required key"),
        ("layers:\n- - {name: 7, role: testing}", "layers[0][0].name", "must be a string, got int"),
        ("layers:\n- - {name: yes, role: testing}", "layers[0][0].name", "must be a string, got bool"),
        ("layers:\n- - {name: [a], role: testing}", "layers[0][0].name", "must be a string, got list"),
        ("layers:\n- - {name: 'tester 1', role: testing}", "layers[0][0].name", "invalid agent name"),
        ("layers:\n- - {name: t, id: t, role: testing}", "layers[0][0].id", "once"),
        ("layers:\n- - {name: t}", "layers[0][0].role", "missing required key"),
        ("layers:\n- - {name: t, role: [testing]}", "layers[0][0].role", "must be a string, got list"),
        ("layers:\n- - {name: t, role: testing, ref: {a: 1}}", "layers[0][0].ref", "must be a list"),
        ("layers:\n- - {name: t, role: testing, ref: [a, 3]}", "layers[0][0].ref[1]", "got int"),
        ("layers:\n- - {name: t, role: testing, ref: [a], refs: [b]}", "layers[0][0].refs", "once"),
        ("- - {name: t, role: testing, ref: [null]}", "layers[0][0].ref[0]", "got null"),
        ("layers:\n- {agents: [{name: t, role: testing, ref: 5}]}", "layers[0].agents[0].ref", "got int"),
    ],
)
def test_schema_invalid(body: str, path: str, fragment: str):
    e = _raises(SchemaInvalid, f"```yaml\n{body}\n```")
    assert e.path == path, str(e)
    assert fragment in e.message, str(e)


@pytest.mark.parametrize(
    "body, path, fragment",
    [
        (
            "- - {name: a, role: coding}\n  - {name: a, role: planning}\n- - {name: t, role: testing, ref: [a]}",
            "layers[0][1].name",
            "duplicate agent 'a' (first at layers[0][0])",
        ),
        (
            "- - {name: a, role: coding}\n- - {name: t, role: testing, ref: [a, ghost]}",
            "layers[1][0].ref[1]",
            "unknown agent 'ghost'",
        ),
        (
            "- - {name: a, role: coding}\n  - {name: b, role: coding, ref: [a]}\n"
            "- - {name: t, role: testing, ref: [b]}",
            "layers[0][1].ref[0]",
            "'a' is in the same layer",
        ),
        (
            "- - {name: a, role: coding, ref: [t]}\n- - {name: t, role: testing, ref: [a]}",
            "layers[0][0].ref[0]",
            "'t' is in a later layer (layers[1])",
        ),
        (
            "- - {name: a, role: coding}\n- - {name: t, role: testing, ref: [a, t]}",
            "layers[1][0].ref[1]",
            "cannot read its own output",
        ),
        (
            "- - {name: a, role: wizardry}\n- - {name: t, role: testing, ref: [a]}",
            "layers[0][0].role",
            "unknown role 'wizardry' (allowed: retrieval, planning, algorithmic, coding, debugging, testing)",
        ),
        (
            "- - {name: a, role: coding}\n- - {name: t, role: testing, ref: [a]}\n"
            "  - {name: u, role: testing, ref: [a]}",
            "layers[1]",
            "exactly one agent",
        ),
        (
            "- - {name: a, role: coding}\n  - {name: lonely, role: retrieval}\n- - {name: t, role: testing, ref: [a]}",
            "layers[0][1]",
            "'lonely' never reaches the final agent 't'",
        ),
        (
            # b reads a, but nobody reads b: both a's output (via b) and b's are wasted.
            "- - {name: a, role: coding}\n- - {name: b, role: debugging, ref: [a]}\n  - {name: c, role: coding}\n"
            "- - {name: t, role: testing, ref: [c]}",
            "layers[0][0]",
            "'a' never reaches",
        ),
        (
            "- {agents: [{name: a, role: coding}, {name: a, role: coding}]}\n- - {name: t, role: testing, ref: [a]}",
            "layers[0].agents[1].name",
            "first at layers[0].agents[0]",
        ),
    ],
)
def test_logic_invalid(body: str, path: str, fragment: str):
    e = _raises(LogicInvalid, f"```yaml\nlayers:\n{_indent(body)}\n```")
    assert e.path == path, str(e)
    assert fragment in e.message, str(e)


def _indent(body: str) -> str:
    return "\n".join("  " + line for line in body.splitlines())


def test_max_agents_cap():
    assert DIFFICULTY_NODE_CAPS == {"easy": 4, "medium": 7, "hard": 10}
    assert parse_layered_yaml(ANSWER, max_agents=4).final == "tester_1"
    e = _raises(LogicInvalid, ANSWER, max_agents=3)
    assert e.path == "layers" and "4 agents, more than the cap of 3" in e.message
    with pytest.raises(ValueError, match="max_agents must be at least 1, got 0"):
        parse_layered_yaml(ANSWER, max_agents=0)


def test_try_parse_returns_error_instead_of_raising():
    t, err = try_parse_layered_yaml(ANSWER)
    assert err is None and t is not None and t.final == "tester_1"
    t, err = try_parse_layered_yaml("no yaml")
    assert t is None and isinstance(err, NoYAMLFound)


def test_check_on_topologies_built_in_code():
    bad = LayeredTopology(
        layers=[
            [LayeredAgent(name="a", role="coding", ref=["t"])],
            [LayeredAgent(name="t", role="testing", ref=["a"])],
        ]
    )
    with pytest.raises(LogicInvalid, match=r"layers\[0\]\[0\]\.ref\[0\]"):
        bad.check()
    ok = LayeredTopology(
        layers=[[LayeredAgent(name="a", role="CODING")], [LayeredAgent(name="t", role="testing", ref=["a"])]]
    )
    assert ok.check(CONDUCTOR_ROLES).layers[0][0].role == "coding"


def _built(*layers: list[LayeredAgent]) -> LayeredTopology:
    return LayeredTopology(layers=list(layers))


A = LayeredAgent


@pytest.mark.parametrize(
    "topo, kwargs, path, fragment",
    [
        (
            _built([A(name="a", role="coding")], [A(name="b", role="coding"), A(name="c d", role="coding")]),
            {},
            "layers[1][1].name",
            "invalid node id 'c d'",
        ),
        (
            _built(
                [A(name="a", role="coding"), A(name="b", role="coding")],
                [A(name="c", role="coding", ref=["a"])],
                [A(name="t", role="testing", ref=["c", "b", "ghost"])],
            ),
            {},
            "layers[2][0].ref[2]",
            "unknown node 'ghost'",
        ),
        (
            _built(
                [A(name="a", role="coding"), A(name="b", role="coding")],
                [A(name="b", role="testing", ref=["a"])],
            ),
            {},
            "layers[1][0].name",
            "duplicate id 'b' (first at layers[0][1])",
        ),
        (
            _built([A(name="a", role="coding")], [A(name="t", role="", ref=["a"])]),
            {},
            "layers[1][0].role",
            "unknown role ''",
        ),
        (
            _built(
                [A(name="a", role="coding"), A(name="b", role="coding", ref=["t"])],
                [A(name="t", role="testing", ref=["a", "b"])],
            ),
            {},
            "layers[0][1].ref[0]",
            "cycle (b -> t -> b)",
        ),
        (
            _built([A(name="a", role="coding")], [A(name="t", role="testing", ref=["a"])]),
            {"task_template": "{task} {nope}"},
            "task_template",
            "unknown template placeholder {nope}",
        ),
        (
            _built([A(name="a", role="coding")], [A(name="t", role="testing", ref=["a"])]),
            {"llms": {"big": "embedded"}},
            "llm",
            "unknown LLM 'default' (known: big)",
        ),
    ],
)
def test_to_graph_errors_name_the_place_in_the_layers(topo, kwargs, path, fragment):
    with pytest.raises(SpecError) as info:
        topo.to_graph(**kwargs)
    assert info.value.path == path, str(info.value)
    assert fragment in info.value.message, str(info.value)
    assert "nodes[" not in str(info.value) and "edges[" not in str(info.value)


def test_to_graph_spec_names_the_agent_with_a_bad_name():
    topo = _built(
        [A(name="a", role="coding")],
        [A(name="b", role="coding", ref=["a"]), A(name="c", role="coding", ref=["a"])],
        [A(name="t t", role="testing", ref=["b", "c"])],
    )
    with pytest.raises(SpecError, match=r"^layers\[2\]\[0\]\.name: invalid node id 't t'"):
        topo.to_graph_spec()
