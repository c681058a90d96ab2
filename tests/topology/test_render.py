"""Mermaid text and PNG drawings of graphs and traces."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from societas.topology.graph import Graph
from societas.topology.render import graph_to_mermaid, render_graph_png, render_trace_png, trace_to_mermaid
from societas.topology.trace import Trace, TraceEvent

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _chain() -> Graph:
    return Graph.build(
        "chain",
        [
            {"id": "plan", "role": "planner"},
            {"id": "code", "role": "coder"},
            {"id": "test", "role": "tester"},
        ],
        [("plan", "code"), ("code", "test")],
    )


def _debate() -> Graph:
    return Graph.build(
        "debate",
        [
            {"id": "alice", "role": "solver"},
            {"id": "bob", "role": "solver"},
            {"id": "judge", "role": "aggregator"},
            {"id": "check", "kind": "function", "function": "pkg.mod:check"},
            {"id": "search", "kind": "tool", "function": "search"},
        ],
        [("alice", "bob"), ("bob", "alice"), ("alice", "judge"), ("bob", "judge", "votes"), ("judge", "check"),
         ("search", "alice"), ("check", "check")],
        rounds=2,
        final="judge",
    )  # fmt: skip


def _event(
    sender: str, receivers: list[str], tokens: int, step: int = 0, role: str | None = "solver"
) -> TraceEvent:
    return TraceEvent(
        step=step, round=0, sender=sender, receivers=receivers, kind="agent", role=role, prompt=[], output="x",
        completion_tokens=tokens,
    )  # fmt: skip


def _debate_trace() -> Trace:
    return Trace(
        [
            _event("alice", ["bob", "judge"], 120, 0),
            _event("bob", ["alice", "judge"], 30, 0),
            _event("alice", ["bob", "judge"], 3, 1),
            _event("judge", ["check"], 7, 2, role="aggregator"),
        ]
    )


def _assert_png(path: Path, min_bytes: int = 3000) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > min_bytes
    # The IHDR chunk holds the image size; a drawing is not a speck.
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 200 and height >= 100


# -- Mermaid ----------------------------------------------------------------------


def test_graph_mermaid_nodes_edges_shapes_and_final():
    text = graph_to_mermaid(_debate())
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert '    alice["alice<br/>solver"]' in lines
    assert '    check[["check<br/>function"]]' in lines  # function: subroutine shape
    assert '    search{{"search<br/>tool"}}' in lines  # tool: hexagon
    for edge in [
        "alice --> bob",
        "bob --> alice",
        "bob -->|votes| judge",
        "judge --> check",
        "check --> check",
    ]:
        assert f"    {edge}" in lines
    assert "    class judge final" in lines
    assert graph_to_mermaid(_chain(), direction="LR").startswith("flowchart LR\n")
    with pytest.raises(ValueError, match="direction"):
        graph_to_mermaid(_chain(), direction="sideways")


def test_mermaid_ids_are_escaped():
    g = Graph.build(
        "odd",
        [{"id": "end", "role": "solver"}, {"id": "a.b-c", "role": "solver"}, {"id": "a_b_c", "role": "solver"},
         {"id": "_x", "role": "custom<b>", "prompt": 'Say "hi" | bye'}],
        [("end", "a.b-c"), ("a.b-c", "a_b_c"), ("a_b_c", "_x", 'say "x" | y')],
    )  # fmt: skip
    text = graph_to_mermaid(g)
    ids = re.findall(r"^    (\w+)[\[{]", text, flags=re.MULTILINE)
    assert ids == ["end_", "a_b_c", "a_b_c_2", "_x"]  # keyword avoided, collisions made unique
    assert all(re.fullmatch(r"[A-Za-z_]\w*", i) for i in ids)
    assert '"a.b-c<br/>solver"' in text  # the real id stays in the label
    assert "custom#lt;b#gt;" in text
    assert "-->|say #quot;x#quot; #124; y| _x" in text
    assert "end_ --> a_b_c" in text and "a_b_c --> a_b_c_2" in text


def test_trace_mermaid_tokens_and_calls():
    text = trace_to_mermaid(_debate_trace(), _debate())
    lines = text.splitlines()
    assert "    alice -->|123 tok| bob" in lines  # 120 + 3 over two rounds
    assert "    bob -->|30 tok| alice" in lines
    assert "    alice -->|123 tok| judge" in lines
    assert "    judge -->|7 tok| check" in lines
    assert "    search -.-> alice" in lines  # a graph edge that carried nothing
    assert '    alice["alice<br/>solver<br/>2 calls"]' in lines
    assert '    judge["judge<br/>aggregator<br/>1 call"]' in lines
    assert '    search{{"search<br/>tool<br/>0 calls"}}' in lines


def test_trace_mermaid_without_graph_uses_senders_and_receivers():
    text = trace_to_mermaid(_debate_trace())
    assert "    alice -->|123 tok| bob" in text
    assert '    check["check<br/>agent<br/>0 calls"]' in text  # only ever a receiver
    assert "search" not in text and "-.->" not in text


# -- PNG --------------------------------------------------------------------------


def test_png_of_a_chain(tmp_path: Path):
    out = render_graph_png(_chain(), tmp_path / "deep" / "chain.png", title="A chain")
    assert out == tmp_path / "deep" / "chain.png"
    _assert_png(out)


def test_png_of_a_cyclic_graph_and_a_single_node(tmp_path: Path):
    _assert_png(render_graph_png(_debate(), tmp_path / "debate.png"))
    one = Graph.build("one", [{"id": "solo", "role": "solver"}])
    _assert_png(render_graph_png(one, tmp_path / "one.png"), min_bytes=1500)


def test_png_of_fifty_nodes(tmp_path: Path):
    nodes = [{"id": f"n{i}", "role": "solver"} for i in range(50)]
    edges = [(f"n{i}", f"n{i + 10}") for i in range(40)]
    _assert_png(render_graph_png(Graph.build("grid", nodes, edges), tmp_path / "fifty.png"))


def test_png_of_traces(tmp_path: Path):
    with_graph = render_trace_png(_debate_trace(), tmp_path / "trace.png", _debate(), title="debate run")
    without = render_trace_png(_debate_trace(), tmp_path / "trace_only.png")
    _assert_png(with_graph)
    _assert_png(without)
    assert with_graph.read_bytes() != without.read_bytes()
    # An empty trace still draws (its graph).
    _assert_png(render_trace_png(Trace(), tmp_path / "empty.png", _chain()))


def test_talking_layers_are_laid_on_a_circle_and_dags_in_columns():
    from societas.topology.patterns import layered, society_of_thought
    from societas.topology.render import layout_positions

    soc = society_of_thought(n_personas=4, rounds=2)
    layers = soc.topological_layers()
    pos = layout_positions(layers, set(soc.edges))
    personas = layers[0]
    assert len(personas) == 4
    xs = {round(pos[p][0], 6) for p in personas}
    assert len(xs) > 1  # not one overlapping column
    centre = sum(pos[p][0] for p in personas) / 4
    radii = {round(((pos[p][0] - centre) ** 2 + pos[p][1] ** 2) ** 0.5, 6) for p in personas}
    assert len(radii) == 1  # all on one circle
    assert pos["aggregator"][0] > max(pos[p][0] for p in personas)
    dag = layered([["planner"], ["coder"] * 3, ["tester"]])
    dpos = layout_positions(dag.topological_layers(), set(dag.edges))
    assert {dpos[n][0] for n in dag.topological_layers()[1]} == {1.0}


def test_society_edges_pass_clear_of_other_nodes_with_visible_arrowheads():
    """Five personas on a circle talking to each other and to an aggregator: no edge runs
    through a node it does not join, and every arrowhead is clearly wider than its line."""
    from matplotlib.patches import FancyArrowPatch

    from societas.agents.llm import FunctionLLM
    from societas.topology import Runtime
    from societas.topology.patterns import society_of_thought
    from societas.topology.render import trace_figure

    graph = society_of_thought(n_personas=5, rounds=2)
    trace = Runtime(graph, llm=FunctionLLM(lambda prompt: "Final answer: 3"), seed=0).run("q").trace
    fig = trace_figure(trace, graph)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = {
        t.get_text().split("\n")[0]: t.get_bbox_patch().get_window_extent(renderer)
        for t in ax.texts
        if "\n" in t.get_text()  # node boxes hold several lines; edge labels one
    }
    assert set(boxes) == set(graph.nodes)

    def nearest(x: float, y: float) -> str:
        return min(
            boxes,
            key=lambda n: math.hypot(
                x - boxes[n].x0 - boxes[n].width / 2, y - boxes[n].y0 - boxes[n].height / 2
            ),
        )

    checked = 0
    for arrow in (p for p in ax.patches if isinstance(p, FancyArrowPatch)):
        assert arrow.get_mutation_scale() >= 2.5 * arrow.get_linewidth()  # the head shows past the line
        polygons = ax.transData.transform_path(arrow.get_path()).to_polygons(closed_only=False)
        points = [  # the shaft and the head, densely (a straight piece between vertices: 20 points)
            (x0 + (x1 - x0) * k / 20, y0 + (y1 - y0) * k / 20)
            for poly in polygons
            for (x0, y0), (x1, y1) in zip(poly[:-1], poly[1:])
            for k in range(21)
        ]
        ends = {nearest(*points[0]), nearest(*points[-1])}
        if len(ends) == 1:
            continue  # a self-loop
        for name, box in boxes.items():
            if name not in ends:
                inner = box.padded(-3)
                assert not any(inner.contains(x, y) for x, y in points), (sorted(ends), name)
        checked += 1
    assert checked >= 20
