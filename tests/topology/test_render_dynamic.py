"""Drawings of graphs that decide at run time: routers' dashed edges and END, router decisions,
tool calls, interrupts and subgraphs in traces (Mermaid text and PNG)."""

from __future__ import annotations

from pathlib import Path

import pytest

import societas.topology.render as render
from societas.agents import FunctionLLM
from societas.agents.tools import tool
from societas.topology import END, GraphSpec, MemoryCheckpointer, Runtime
from societas.topology.graph import Graph
from societas.topology.render import graph_to_mermaid, render_graph_png, render_trace_png, trace_to_mermaid
from societas.topology.trace import Trace, TraceEvent

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path, min_bytes: int = 3000) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > min_bytes
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 200 and height >= 100


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
    """Two solvers and a judge with a wide box; solvers reach it from the side."""
    return Graph.build(
        "debate",
        [
            {"id": "alice", "role": "solver"},
            {"id": "bob", "role": "solver"},
            {"id": "judge", "role": "aggregator"},
        ],
        [("alice", "bob"), ("bob", "alice"), ("alice", "judge"), ("bob", "judge")],
        rounds=2,
    )


def _fn(ident: str) -> dict:
    return {"id": ident, "kind": "function", "function": ident}


def _supervised() -> Graph:
    return Graph(
        GraphSpec.from_data(
            {
                "name": "supervised",
                "nodes": [_fn("sup"), _fn("coder"), _fn("writer")],
                "edges": ["coder -> sup", "writer -> sup"],
                "routers": [
                    {"source": "sup", "function": "pick", "targets": ["coder", "writer", "END"],
                     "labels": {"coder": "needs code", "END": "done"}},
                ],
            }
        )
    )  # fmt: skip


def _supervised_run() -> Trace:
    """sup sends to coder twice, then ends: writer is never chosen."""
    order = ["coder", "coder", END]
    functions = {
        "sup": lambda c: "s",
        "coder": lambda c: "c",
        "writer": lambda c: "w",
        "pick": lambda c: order[c.instance],
    }
    return Runtime(_supervised().spec, functions=functions).run("t").trace


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def _helpdesk() -> Graph:
    """An LLM router, an agent with a tool, an interrupt node and a subgraph node."""
    inner = {"name": "inner", "nodes": [_fn("pack")]}
    return Graph(
        GraphSpec.from_data(
            {
                "name": "helpdesk",
                "nodes": [
                    {"id": "triage", "role": "triage", "prompt": "Triage."},
                    {"id": "coder", "role": "coder", "prompt": "Code.", "tools": ["add"]},
                    _fn("writer"),
                    {"id": "review", "kind": "interrupt", "prompt": "Ship it?"},
                    {"id": "ship", "kind": "graph", "graph": inner},
                ],
                "edges": ["coder -> review", "review -> ship", "writer -> ship"],
                "routers": [{"source": "triage", "kind": "llm", "targets": ["coder", "writer", "END"],
                             "labels": {"coder": "needs code", "writer": "needs prose"}}],
            }
        )
    )  # fmt: skip


def _helpdesk_llm(messages: list[dict]) -> str:
    system = messages[0]["content"]
    if system.startswith("Triage"):
        return "a sum: this needs code"
    if system.startswith("Code"):
        if any(m["role"] == "assistant" for m in messages):
            return "It is 42."
        return '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 40}}</tool_call>'
    return "coder"  # the router's question


def _helpdesk_runtime() -> Runtime:
    return Runtime(
        _helpdesk().spec,
        llm=FunctionLLM(_helpdesk_llm),
        tools=[add],
        functions={"writer": lambda c: "prose", "pack": lambda c: "packed"},
        checkpointer=MemoryCheckpointer(),
    )


# -- Mermaid of graphs ---------------------------------------------------------------


def test_router_graph_mermaid_dashed_labelled_with_an_end_node():
    assert graph_to_mermaid(_supervised()) == (
        "flowchart TD\n"
        "    %% supervised\n"
        '    sup[["sup<br/>function<br/>router: pick()"]]\n'
        '    coder[["coder<br/>function"]]\n'
        '    writer[["writer<br/>function"]]\n'
        '    END_(("END"))\n'
        "    coder --> sup\n"
        "    writer --> sup\n"
        "    sup -.->|needs code| coder\n"
        "    sup -.-> writer\n"
        "    sup -.->|done| END_\n"
        "    classDef final stroke-width:3px\n"
        "    class sup final\n"
    )


def test_router_kinds_tools_and_node_kinds_in_graph_mermaid():
    text = graph_to_mermaid(_helpdesk())
    lines = text.splitlines()
    assert '    triage["triage<br/>triage<br/>router: llm"]' in lines
    assert '    coder["coder<br/>coder<br/>tools: add"]' in lines
    assert '    review>"review<br/>interrupt"]' in lines  # interrupt: a flag
    assert '    ship("ship<br/>graph")' in lines  # subgraph: a rounded box
    assert "    triage -.->|needs prose| writer" in lines and "    triage -.-> END_" in lines
    spec = GraphSpec.from_data(
        {
            "name": "policy",
            "nodes": [_fn("s"), _fn("a"), _fn("b")],
            "routers": [{"source": "s", "kind": "router", "router": "policy", "targets": ["a", "b"],
                         "multi": True}],
        }
    )  # fmt: skip
    text = graph_to_mermaid(Graph(spec))
    assert '    s[["s<br/>function<br/>router: policy (multi)"]]' in text.splitlines()
    assert "END" not in text  # no router targets END: no terminal node
    assert "    s -.-> a\n    s -.-> b\n" in text


def test_end_terminal_id_never_collides_with_a_node_named_end():
    spec = GraphSpec.from_data(
        {"name": "g", "nodes": [_fn("END"), _fn("x")], "edges": ["END -> x"],
         "routers": [{"source": "x", "function": "f", "targets": ["END"]}]}
    )  # fmt: skip
    text = graph_to_mermaid(Graph(spec))
    assert '    END_[["END<br/>function"]]' in text  # the node
    assert '    END__2(("END"))' in text  # the terminal
    assert "    END_ --> x\n    x -.-> END__2\n" in text


def test_static_graph_mermaid_is_unchanged():
    assert graph_to_mermaid(_chain()) == (
        "flowchart TD\n"
        "    %% chain\n"
        '    plan["plan<br/>planner"]\n'
        '    code["code<br/>coder"]\n'
        '    test["test<br/>tester"]\n'
        "    plan --> code\n"
        "    code --> test\n"
        "    classDef final stroke-width:3px\n"
        "    class test final\n"
    )
    text = graph_to_mermaid(_debate())
    assert "-.->" not in text and "END" not in text and "router" not in text


# -- Mermaid of traces ---------------------------------------------------------------


def test_trace_mermaid_shows_routes_taken_and_not_taken():
    assert trace_to_mermaid(_supervised_run(), _supervised()) == (
        "flowchart TD\n"
        '    sup[["sup<br/>function<br/>3 calls"]]\n'  # router decisions are not calls
        '    coder[["coder<br/>function<br/>2 calls"]]\n'
        '    writer[["writer<br/>function<br/>0 calls"]]\n'
        '    END_(("END"))\n'
        "    coder -->|2 msgs, 2 chars| sup\n"  # function nodes make no tokens: what they carried
        "    writer -.-> sup\n"
        "    sup -->|needs code: 2x, 2 msgs, 2 chars| coder\n"
        "    sup -.-> writer\n"
        "    sup -->|done: 1x| END_\n"
        "    linkStyle 3 stroke:#b8b8b8,color:#9a9a9a\n"  # only the route never taken is faint
        "    classDef final stroke-width:3px\n"
        "    class sup final\n"
    )


def test_trace_mermaid_without_graph_reads_the_routes_from_router_events():
    text = trace_to_mermaid(_supervised_run())
    lines = text.splitlines()
    assert "    sup -->|2x, 2 msgs, 2 chars| coder" in lines
    assert "    sup -.-> writer" in lines  # allowed, never chosen
    assert "    sup -->|1x| END_" in lines
    assert '    writer["writer<br/>agent<br/>0 calls"]' in lines  # known only as a target: kind unknown
    faint = [ln for ln in lines if ln.startswith("    linkStyle")]
    edges = [ln for ln in lines if "-->" in ln or "-.->" in ln]
    assert faint == [f"    linkStyle {edges.index('    sup -.-> writer')} stroke:#b8b8b8,color:#9a9a9a"]


def test_tool_calls_interrupts_and_subgraphs_in_trace_mermaid():
    rt = _helpdesk_runtime()
    waiting = rt.run("2+40?", thread="t")
    assert waiting.stopped == "interrupted"
    lines = trace_to_mermaid(waiting.trace, _helpdesk()).splitlines()
    assert '    review>"review<br/>interrupt<br/>0 calls<br/>waiting for input"]' in lines
    assert "    review -.-> ship" in lines

    done = rt.resume("t", "yes")
    trace = done.trace
    assert {e.kind for e in trace} >= {"agent", "router", "tool_call", "interrupt", "graph"}
    text = trace_to_mermaid(trace, _helpdesk())
    lines = text.splitlines()
    # two model turns and one tool call: one call of the node, its tool call counted apart
    assert '    coder["coder<br/>coder<br/>1 call<br/>1 tool call"]' in lines
    assert "coder --> coder" not in text and "coder -->|" not in text.replace("coder -->|3 tok| review", "")
    assert '    review>"review<br/>interrupt<br/>1 call"]' in lines  # answered: no longer waiting
    assert '    ship("ship<br/>graph<br/>1 call")' in lines
    # the edge carries the triage agent's tokens, not the router model's
    triage = next(e for e in trace if e.sender == "triage" and e.kind == "agent")
    router = next(e for e in trace if e.kind == "router")
    assert router.completion_tokens > 0
    assert f"    triage -->|needs code: 1x, {triage.completion_tokens} tok| coder" in lines
    assert "    triage -.->|needs prose| writer" in lines and "    triage -.-> END_" in lines
    assert "    linkStyle 4,5 stroke:#b8b8b8,color:#9a9a9a" in lines
    # without the graph the kinds come from the events
    text = trace_to_mermaid(trace)
    assert '    review>"review<br/>interrupt<br/>1 call"]' in text
    assert "coder --> coder" not in text


def test_a_node_first_seen_as_a_receiver_takes_the_kind_of_its_own_output():
    def ev(sender: str, receivers: list[str], kind: str) -> TraceEvent:
        return TraceEvent(step=0, round=0, sender=sender, receivers=receivers, kind=kind, role=None,  # type: ignore[arg-type]
                          prompt=[], output="x")  # fmt: skip

    trace = Trace([ev("a", ["f"], "agent"), ev("f", ["g"], "function"), ev("g", [], "tool")])
    text = trace_to_mermaid(trace)
    assert '    f[["f<br/>function<br/>1 call"]]' in text
    assert '    g{{"g<br/>tool<br/>1 call"}}' in text


# -- PNG --------------------------------------------------------------------------


class _Arrows:
    """Records the arrows a drawing makes: (linestyle, colour, shrinkB, connectionstyle)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[dict] = []
        real = render.FancyArrowPatch
        made = self.made

        def record(*args, **kwargs):
            made.append(kwargs)
            return real(*args, **kwargs)

        monkeypatch.setattr(render, "FancyArrowPatch", record)

    def styles(self) -> list[tuple[str, str]]:
        return [(k["linestyle"], k["color"]) for k in self.made]


def test_pngs_of_a_router_graph_and_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    arrows = _Arrows(monkeypatch)
    _assert_png(render_graph_png(_supervised(), tmp_path / "graph.png"))
    # two static edges solid, three router edges (END included) dashed
    assert arrows.styles() == [("-", "#444444")] * 2 + [("--", "#444444")] * 3

    arrows.made.clear()
    _assert_png(render_trace_png(_supervised_run(), tmp_path / "trace.png", _supervised()))
    # coder->sup used; writer->sup never used (dashed); sup->coder and sup->END taken (solid);
    # sup->writer never taken (dashed and faint)
    assert arrows.styles() == [("-", "#444444"), ("--", "#444444"), ("-", "#444444"),
                               ("--", "#b8b8b8"), ("-", "#444444")]  # fmt: skip

    arrows.made.clear()
    rt = _helpdesk_runtime()
    rt.run("2+40?", thread="t")
    trace = rt.resume("t", "yes").trace
    _assert_png(render_graph_png(_helpdesk(), tmp_path / "helpdesk.png"))
    _assert_png(render_trace_png(trace, tmp_path / "helpdesk_trace.png", _helpdesk()))
    _assert_png(render_trace_png(trace, tmp_path / "helpdesk_trace_only.png"))


def test_png_arrows_end_at_box_borders_and_bend_around_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    arrows = _Arrows(monkeypatch)
    render_graph_png(_debate(), tmp_path / "debate.png")
    # one arrow per edge, in declaration order
    judge = [k["shrinkB"] for (a, b), k in zip(_debate().edges, arrows.made) if b == "judge"]
    # alice and bob enter the wide 'aggregator' box from the side: a fixed shrink of 2.4 font
    # sizes (21.6 points) left both heads under the box
    assert len(judge) == 2 and min(judge) > 26.0

    arrows.made.clear()
    # writer -> ship would run straight through review (same row): it bends
    render_graph_png(_helpdesk(), tmp_path / "helpdesk.png")
    rads = [k["connectionstyle"] for k in arrows.made]
    g = _helpdesk()
    edges = [*g.edges, *[(a, b) for a, b, _ in g.conditional_edges()]]
    assert rads[edges.index(("writer", "ship"))] != "arc3,rad=0.0"
    assert rads[edges.index(("review", "ship"))] == "arc3,rad=0.0"


def test_an_agent_waiting_for_a_tool_approval_stays_an_agent():
    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def fn(messages: list[dict]) -> str:
        if any(m["role"] == "assistant" for m in messages):
            return "done"
        return '<tool_call>{"name": "delete", "arguments": {"path": "x"}}</tool_call>'

    spec = GraphSpec.from_data(
        {"name": "t", "nodes": [{"id": "x", "role": "s", "prompt": "S", "tools": ["delete"]}]}
    )
    rt = Runtime(spec, llm=FunctionLLM(fn), tools=[delete], checkpointer=MemoryCheckpointer())
    waiting = rt.run("t", thread="1").trace
    assert trace_to_mermaid(waiting).splitlines()[1] == '    x["x<br/>s<br/>0 calls<br/>waiting for input"]'
    done = rt.resume("1", "yes").trace
    assert trace_to_mermaid(done).splitlines()[1] == '    x["x<br/>s<br/>1 call<br/>1 tool call"]'
