"""Graphs that decide at run time: routers, fan-out, termination conditions,
tool loops, interrupts, checkpoints, streaming and subgraphs — checked with
scripted FunctionLLMs and hand-computed expectations."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from societas.agents import FunctionLLM
from societas.agents.tools import tool
from societas.topology import GraphSpec, Runtime
from societas.topology.checkpoint import GraphMismatch, MemoryCheckpointer, SqliteCheckpointer, ThreadNotFound
from societas.topology.errors import SpecError
from societas.topology.executor import interrupt
from societas.topology.graph import Graph
from societas.topology.routing import END, Send
from societas.topology.run_state import NodeError


def _fn(ident):
    return {"id": ident, "kind": "function", "function": ident}


def supervisor_spec(**extra):
    return GraphSpec.from_data(
        {
            "name": "supervised",
            "nodes": [_fn("sup"), _fn("a"), _fn("b")],
            "edges": ["a -> sup", "b -> sup"],
            "routers": [{"source": "sup", "function": "pick", "targets": ["a", "b", "END"]}],
            **extra,
        }
    )


def _functions(order):
    def sup(ctx):
        return f"sup saw {sorted(ctx.inputs)}"

    def a(ctx):
        return "a-done"

    def b(ctx):
        return "b-done"

    def pick(ctx):
        return order[ctx.instance]

    return {"sup": sup, "a": a, "b": b, "pick": pick}


def test_function_router_drives_a_supervisor_loop_in_message_mode():
    rt = Runtime(supervisor_spec(), functions=_functions(["a", "b", END]))
    assert rt.graph.mode == "messages"
    res = rt.run("t")
    outputs = [(e.step, e.sender, e.kind) for e in res.trace if e.kind != "router"]
    assert outputs == [
        (0, "sup", "function"),
        (1, "a", "function"),
        (2, "sup", "function"),
        (3, "b", "function"),
        (4, "sup", "function"),
    ]
    decisions = [json.loads(e.output) for e in res.trace if e.kind == "router"]
    assert decisions == [["a"], ["b"], ["END"]]
    assert res.output == "sup saw ['b']"  # the last message before the run ended
    assert res.stopped is None and res.ended_by == "no messages left"
    # the node's output event names where the router sent it
    assert [e.receivers for e in res.trace if e.sender == "sup" and e.kind == "function"] == [
        ["a"],
        ["b"],
        [],
    ]


def test_router_returning_an_unknown_node_is_a_node_error_naming_it():
    rt = Runtime(supervisor_spec(), functions=_functions(["c"]))
    with pytest.raises(NodeError, match=r"unknown target 'c'.*allowed: a, b, END"):
        rt.run("t")


def test_single_target_router_refuses_several_targets():
    rt = Runtime(supervisor_spec(), functions=_functions([["a", "b"]]))
    with pytest.raises(NodeError, match="not declared multi"):
        rt.run("t")


def test_spec_errors_name_router_fields():
    base = {"name": "g", "nodes": [_fn("x"), _fn("y")]}
    with pytest.raises(SpecError, match=r"routers\[0\]\.targets\[1\].*unknown node 'z'"):
        Graph(
            GraphSpec.from_data(
                {**base, "routers": [{"source": "x", "function": "f", "targets": ["y", "z"]}]}
            )
        )
    with pytest.raises(SpecError, match=r"routers\[0\]\.function"):
        GraphSpec.from_data({**base, "routers": [{"source": "x", "targets": ["y"]}]})
    with pytest.raises(SpecError, match=r"also a static edge"):
        Graph(
            GraphSpec.from_data(
                {**base, "edges": ["x -> y"], "routers": [{"source": "x", "function": "f", "targets": ["y"]}]}
            )
        )
    with pytest.raises(SpecError, match=r"routers\[0\]\.fallback"):
        GraphSpec.from_data(
            {**base, "routers": [{"source": "x", "function": "f", "targets": ["y"], "fallback": "x"}]}
        )


def test_routers_and_conditions_round_trip_through_yaml():
    spec = supervisor_spec(
        until={"any": [{"mention": "DONE", "from": ["sup"]}, {"max_steps": 9}]}, max_steps=20
    )
    again = GraphSpec.from_yaml_text(spec.to_yaml())
    assert again == spec
    assert again.routers[0].targets == ["a", "b", "END"]
    assert GraphSpec.from_json_text(spec.to_json()) == spec


def test_send_fans_out_to_instances_that_share_one_batched_call():
    items = ["apple", "kiwi", "fig", "plum"]

    def llm_fn(messages):
        text = messages[-1]["content"]
        word = next(w for w in items if w in text)
        return f"{word}:{len(word)}"

    llm = FunctionLLM(llm_fn)
    spec = GraphSpec.from_data(
        {
            "name": "mapreduce",
            "nodes": [
                _fn("split"),
                {"id": "worker", "role": "worker", "prompt": "Count letters."},
                _fn("reduce"),
            ],
            "edges": ["worker -> reduce"],
            "routers": [{"source": "split", "function": "fan", "targets": ["worker"], "multi": True}],
        }
    )

    def fan(ctx):
        return [Send("worker", w) for w in ctx.output.split(",")]

    seen = []

    def reduce(ctx):
        seen.append(sorted(text for _, text in ctx.messages))
        return "total"

    rt = Runtime(
        spec, llm=llm, functions={"split": lambda ctx: ",".join(items), "fan": fan, "reduce": reduce}
    )
    res = rt.run("count")
    assert llm.batch_sizes == [4]  # four instances of one node, one call
    outs = sorted(e.output for e in res.trace if e.sender == "worker")
    assert outs == sorted(f"{w}:{len(w)}" for w in items)
    # reduce runs once; its inputs are keyed by sender, so the four messages arrive as one sender entry
    reduce_events = [e for e in res.trace if e.sender == "reduce"]
    assert len(reduce_events) == 1 and res.output == "total"
    assert reduce_events[0].meta["inputs_from"] == ["worker"] * 4
    assert seen == [sorted(f"{w}:{len(w)}" for w in items)]  # a function reducer reads every message


def _llm_router_spec(fallback=None):
    router = {
        "source": "sup",
        "kind": "llm",
        "targets": ["coder", "writer", "END"],
        "labels": {"coder": "writes code", "writer": "writes prose"},
    }
    if fallback:
        router["fallback"] = fallback
    return GraphSpec.from_data(
        {
            "name": "llm-routed",
            "nodes": [_fn("sup"), _fn("coder"), _fn("writer")],
            "routers": [router],
        }
    )


def _fns():
    return {"sup": lambda c: "please write a poem", "coder": lambda c: "code", "writer": lambda c: "poem"}


def test_llm_router_parses_the_answer_against_the_targets():
    prompts = []

    def fn(messages):
        prompts.append(messages)
        return "The writer should take this."

    rt = Runtime(_llm_router_spec(), llm=FunctionLLM(fn), functions=_fns())
    res = rt.run("t")
    assert [e.sender for e in res.trace if e.kind == "function"] == ["sup", "writer"]
    assert "writes prose" in prompts[0][-1]["content"] and "please write a poem" in prompts[0][-1]["content"]
    router = next(e for e in res.trace if e.kind == "router")
    assert router.receivers == ["writer"] and router.meta["answer"].startswith("The writer")


def test_llm_router_retries_once_with_the_allowed_list_then_falls_back():
    answers = iter(["hmm", "coder!"])
    rt = Runtime(_llm_router_spec(), llm=FunctionLLM(lambda m: next(answers)), functions=_fns())
    res = rt.run("t")
    router = next(e for e in res.trace if e.kind == "router")
    assert router.meta["retried"] and router.meta["first_answer"] == "hmm" and router.receivers == ["coder"]
    assert "names none of the members" in router.prompt[-1]["content"]

    rt = Runtime(_llm_router_spec(fallback="END"), llm=FunctionLLM(lambda m: "no idea"), functions=_fns())
    res = rt.run("t")
    router = next(e for e in res.trace if e.kind == "router")
    assert router.meta["fallback"] and router.receivers == []

    rt = Runtime(_llm_router_spec(), llm=FunctionLLM(lambda m: "no idea"), functions=_fns())
    with pytest.raises(NodeError, match=r"named none of coder, writer, END twice"):
        rt.run("t")


class CountingRouter:
    def __init__(self):
        self.batches = []

    def route_batch(self, ctxs):
        self.batches.append(len(ctxs))
        return ["a" if c.task_index == 0 else "b" for c in ctxs]


def test_router_object_decides_a_whole_step_in_one_call_across_tasks():
    spec = GraphSpec.from_data(
        {
            "name": "policy",
            "nodes": [_fn("s"), _fn("a"), _fn("b")],
            "routers": [{"source": "s", "kind": "router", "router": "policy", "targets": ["a", "b"]}],
        }
    )
    pol = CountingRouter()
    rt = Runtime(
        spec, routers={"policy": pol}, functions={"s": lambda c: "x", "a": lambda c: "A", "b": lambda c: "B"}
    )
    r0, r1 = rt.run_many(["t0", "t1"])
    assert pol.batches == [2]
    assert (r0.output, r1.output) == ("A", "B")


def test_until_ends_a_message_loop_on_a_text_mention():
    spec = GraphSpec.from_data(
        {
            "name": "reflect",
            "nodes": [
                {"id": "writer", "role": "writer", "prompt": "Write."},
                {"id": "critic", "role": "critic", "prompt": "Critique."},
            ],
            "edges": ["writer -> critic", "critic -> writer"],
            "entry": ["writer"],
            "mode": "messages",
            "until": {"mention": "APPROVED", "from": ["critic"]},
        }
    )
    count = {"critic": 0}

    def fn(messages):
        if messages[0]["content"].startswith("Critique"):
            count["critic"] += 1
            return "APPROVED" if count["critic"] == 3 else "needs work"
        return "draft"

    res = Runtime(spec, llm=FunctionLLM(fn)).run("essay")
    assert [e.sender for e in res.trace] == ["writer", "critic"] * 3
    assert res.ended_by.startswith("condition") and res.stopped is None
    assert res.output == "APPROVED"


def test_until_ends_a_debate_early_and_downstream_nodes_still_run():
    spec = GraphSpec.from_data(
        {
            "name": "debate",
            "nodes": [
                {"id": "p", "role": "x", "prompt": "P"},
                {"id": "q", "role": "x", "prompt": "Q"},
                _fn("judge"),
            ],
            "edges": ["p -> q", "q -> p", "p -> judge", "q -> judge"],
            "rounds": 10,
            "until": {"mention": "AGREE"},
        }
    )
    calls = {"n": 0}

    def fn(messages):
        calls["n"] += 1
        return "AGREE" if calls["n"] >= 5 else "no"

    res = Runtime(spec, llm=FunctionLLM(fn), functions={"judge": lambda c: f"judged {len(c.inputs)}"}).run(
        "t"
    )
    assert len(res.outputs["p"]) == 3 and len(res.outputs["q"]) == 3  # the round holding AGREE completes
    assert res.output == "judged 2"
    # rounds alone keeps working
    spec2 = spec.model_copy(update={"until": None, "rounds": 2})
    res2 = Runtime(spec2, llm=FunctionLLM(lambda m: "no"), functions={"judge": lambda c: "j"}).run("t")
    assert len(res2.outputs["p"]) == 2


def test_max_steps_stops_a_message_loop_that_never_ends():
    spec = GraphSpec.from_data(
        {
            "name": "forever",
            "nodes": [_fn("x"), _fn("y")],
            "edges": ["x -> y", "y -> x"],
            "entry": ["x"],
            "mode": "messages",
            "max_steps": 7,
        }
    )
    res = Runtime(spec, functions={"x": lambda c: "1", "y": lambda c: "2"}).run("t")
    assert res.stopped == "max_steps" and len(res.trace) == 7


# -- tools -------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def _tool_llm(script):
    """Answers by turn: the number of its own turns already in the conversation picks the reply."""

    def fn(messages):
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return script(turn, messages)

    return FunctionLLM(fn)


def test_tool_loop_calls_tools_and_answers_with_batched_turns():
    def script(turn, messages):
        if turn == 0:
            return '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 40}}</tool_call>'
        result = re.search(r'"content": "(\d+)"', messages[-1]["content"]).group(1)
        return f"The answer is {result}."

    llm = _tool_llm(script)
    spec = GraphSpec.from_data(
        {
            "name": "react",
            "nodes": [
                {"id": "x", "role": "s", "prompt": "Solve.", "tools": ["add"]},
                {"id": "y", "role": "s", "prompt": "Solve.", "tools": ["add"]},
            ],
        }
    )
    res = Runtime(spec, llm=llm, tools={"add": add}).run("what is 2+40?")
    assert llm.batch_sizes == [2, 2]  # both agents' first turns, then both continuations
    assert res.outputs == {"x": ["The answer is 42."], "y": ["The answer is 42."]}
    kinds = [(e.sender, e.kind, e.meta.get("partial", False)) for e in res.trace]
    assert kinds.count(("x", "agent", True)) == 1 and kinds.count(("x", "tool_call", False)) == 1
    call = next(e for e in res.trace if e.kind == "tool_call")
    assert call.output == "42" and call.meta["arguments"] == {"a": 2, "b": 40}
    assert "<tools>" in res.trace[0].prompt[0]["content"]  # the text protocol is in the system prompt
    assert res.totals["calls"] == 4


def test_tool_mistakes_go_back_to_the_model_and_are_counted():
    def script(turn, messages):
        if turn == 0:
            return '<tool_call>{"name": "add", "arguments": {"a": 1}</tool_call> <tool_call>{"name": "mul"}</tool_call>'
        if turn == 1:
            assert (
                "not valid JSON" in messages[-1]["content"]
                and "unknown tool 'mul'" in messages[-1]["content"]
            )
            return '<tool_call>{"name": "add", "arguments": {"a": "x", "b": 1}}</tool_call>'
        return "gave up"

    spec = GraphSpec.from_data(
        {"name": "r", "nodes": [{"id": "x", "role": "s", "prompt": "S", "tools": ["add"]}]}
    )
    res = Runtime(spec, llm=_tool_llm(script), tools=[add]).run("t")
    final = [e for e in res.trace if e.kind == "agent" and not e.meta.get("partial")][0]
    assert res.output == "gave up"
    assert final.meta["tool_errors"] == 3  # bad JSON, unknown tool, bad argument


def test_tool_loop_stops_at_max_tool_steps():
    spec = GraphSpec.from_data(
        {
            "name": "r",
            "nodes": [{"id": "x", "role": "s", "prompt": "S", "tools": ["add"], "max_tool_steps": 3}],
        }
    )
    llm = _tool_llm(
        lambda t, m: 'again <tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>'
    )
    res = Runtime(spec, llm=llm, tools=[add]).run("t")
    assert llm.calls == 3 and res.output == "again"
    assert [e for e in res.trace if e.kind == "agent"][-1].meta["tool_steps_exhausted"]


# -- interrupts, checkpoints, streaming ------------------------------------------------------


def test_interrupt_node_pauses_and_resume_hands_the_answer_on():
    spec = GraphSpec.from_data(
        {
            "name": "approve",
            "nodes": [_fn("draft"), {"id": "ok", "kind": "interrupt", "prompt": "Publish?"}, _fn("publish")],
            "edges": ["draft -> ok", "ok -> publish"],
        }
    )
    ran = []

    def draft(ctx):
        ran.append("draft")
        return "text"

    rt = Runtime(
        spec,
        checkpointer=MemoryCheckpointer(),
        functions={"draft": draft, "publish": lambda c: f"published ({c.inputs['ok']})"},
    )
    res = rt.run("t", thread="th")
    assert res.interrupted and res.output is None
    assert res.interrupt == {"node": "ok", "question": "Publish?", "inputs": {"draft": "text"}}
    with pytest.raises(ValueError, match="waits for an answer"):
        rt.resume("th")
    res = rt.resume("th", "yes")
    assert res.output == "published (yes)" and ran == ["draft"]


def test_function_interrupt_and_tool_approval():
    def ask(ctx):
        name = interrupt({"question": "name?"})
        return f"hello {name}"

    spec = GraphSpec.from_data({"name": "ask", "nodes": [_fn("ask")]})
    rt = Runtime(spec, checkpointer=MemoryCheckpointer(), functions={"ask": ask})
    assert rt.run("t", thread="a").interrupt == {"question": "name?"}
    assert rt.resume("a", "Ada").output == "hello Ada"

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def script(turn, messages):
        if turn == 0:
            return '<tool_call>{"name": "delete", "arguments": {"path": "/tmp/x"}}</tool_call>'
        return "result: " + messages[-1]["content"]

    spec = GraphSpec.from_data(
        {"name": "t", "nodes": [{"id": "x", "role": "s", "prompt": "S", "tools": ["delete"]}]}
    )
    rt = Runtime(spec, llm=_tool_llm(script), tools=[delete], checkpointer=MemoryCheckpointer())
    res = rt.run("t", thread="1")
    assert res.interrupt["tool"] == "delete" and res.interrupt["arguments"] == {"path": "/tmp/x"}
    assert "deleted /tmp/x" in rt.resume("1", "yes").output
    rt.run("t", thread="2")
    out = rt.resume("2", "no").output
    assert "did not approve" in out and "deleted" not in out.replace("did not approve", "")


def test_checkpoints_per_step_fork_and_errors(tmp_path):
    cp = SqliteCheckpointer(tmp_path / "runs.db")
    spec = supervisor_spec()
    rt = Runtime(spec, functions=_functions(["a", "b", END]), checkpointer=cp)
    res = rt.run("t", thread="main")
    steps = [c.step for c in rt.checkpoints("main")]
    assert steps == [0, 1, 2, 3, 4]
    again = rt.resume("main")  # a finished run resumes to itself, its whole trace rebuilt from the steps
    assert again.output == res.output
    assert [e.to_dict() for e in again.trace] == [e.to_dict() for e in res.trace]
    # each step's checkpoint stores only the events of that step
    assert [len(c.state["task"]["events"]) for c in rt.checkpoints("main")] == [
        2,
        1,
        2,
        1,
        2,
    ]  # sup and its router, then a; ...
    # time travel: from step 2 (sup has decided 'b' next) with an edited message from a
    rt.fork("main", 1, "edited", outputs={"a": "a-EDITED"})
    res2 = rt.resume("edited")
    sup2 = [e for e in res2.trace if e.sender == "sup" and e.kind == "function"]
    assert len(sup2) == 3
    with pytest.raises(ValueError, match="thread 'main' already holds a run"):
        rt.run("t", thread="main")
    with pytest.raises(ThreadNotFound, match="nope"):
        rt.resume("nope")
    other = Runtime(supervisor_spec(max_steps=50), functions=_functions(["a"]), checkpointer=cp)
    with pytest.raises(GraphMismatch):
        other.resume("main")


def test_stream_yields_typed_events_in_order():
    rt = Runtime(supervisor_spec(), functions=_functions(["a", END]))
    events = list(rt.stream("t"))
    types = [e.type for e in events]
    assert types[0] == "step_start" and types[-1] == "run_end"
    assert types[:4] == ["step_start", "node_start", "node_output", "router"]
    assert events[-1].data["result"].output == "sup saw ['a']"


def test_subgraph_runs_as_a_node_and_its_trace_nests():
    inner = {"name": "inner", "nodes": [_fn("double")]}
    spec = GraphSpec.from_data(
        {
            "name": "outer",
            "nodes": [_fn("start"), {"id": "sub", "kind": "graph", "graph": inner}],
            "edges": ["start -> sub"],
        }
    )
    rt = Runtime(spec, functions={"start": lambda c: "21", "double": lambda c: str(2 * int(c.task))})
    res = rt.run("t")
    assert res.output == "42"
    ev = res.trace.by_sender("sub")[0]
    assert [e["sender"] for e in ev.meta["subtrace"]["events"]] == ["double"]


def test_arun_and_astream_match_the_synchronous_run():
    rt = Runtime(supervisor_spec(), functions=_functions(["a", "b", END]))

    async def go():
        res = await rt.arun("t")
        types = [ev.type async for ev in rt.astream("t")]
        return res, types

    res, types = asyncio.run(go())
    assert res.output == rt.run("t").output
    assert types == [e.type for e in rt.stream("t")]


def test_subgraphs_advance_with_the_parent_and_share_its_batched_calls():
    inner = {
        "name": "inner",
        "nodes": [
            {"id": "w", "role": "x", "prompt": "Inner first."},
            {"id": "v", "role": "x", "prompt": "Inner second."},
        ],
        "edges": ["w -> v"],
    }
    spec = GraphSpec.from_data(
        {
            "name": "outer",
            "nodes": [
                _fn("start"),
                {"id": "s1", "kind": "graph", "graph": inner},
                {"id": "s2", "kind": "graph", "graph": inner},
                {"id": "p", "role": "x", "prompt": "Outer."},
                _fn("join"),
            ],
            "edges": ["start -> s1", "start -> s2", "start -> p", "s1 -> join", "s2 -> join", "p -> join"],
        }
    )
    llm = FunctionLLM(
        lambda m: m[0]["content"].split()[0].lower() + "-" + m[0]["content"].split()[-1].rstrip(".")
    )
    rt = Runtime(
        spec, llm=llm, functions={"start": lambda c: "go", "join": lambda c: "|".join(sorted(c.inputs))}
    )
    res = rt.run("t")
    assert llm.batch_sizes == [
        3,
        2,
    ]  # both subgraphs' first agents with the parent's agent, then their second ones
    assert res.output == "p|s1|s2"
    assert res.outputs["s1"] == ["inner-second"]
    ev = res.trace.by_sender("s1")[0]
    assert ev.kind == "graph" and [e["sender"] for e in ev.meta["subtrace"]["events"]] == ["w", "v"]


def test_subgraph_with_a_router_loop_and_an_interrupt_resumes_inside():
    inner = {
        "name": "inner",
        "nodes": [_fn("count"), {"id": "ask", "kind": "interrupt", "prompt": "More?"}],
        "edges": ["ask -> count"],
        "routers": [{"source": "count", "function": "again", "targets": ["count", "ask", "END"]}],
    }
    spec = GraphSpec.from_data(
        {
            "name": "outer",
            "nodes": [{"id": "sub", "kind": "graph", "graph": inner}, _fn("after")],
            "edges": ["sub -> after"],
        }
    )

    def count(ctx):
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return str(ctx.state["n"])

    def again(ctx):
        n = int(ctx.output)
        return "count" if n < 2 else ("ask" if n == 2 else END)

    rt = Runtime(
        spec,
        checkpointer=MemoryCheckpointer(),
        functions={"count": count, "again": again, "after": lambda c: f"after {c.inputs['sub']}"},
    )
    res = rt.run("t", thread="s")
    assert res.interrupted and res.interrupt == {
        "subgraph": "sub",
        "payload": {"node": "ask", "question": "More?", "inputs": {"count": "2"}},
    }
    res = rt.resume("s", "yes")
    assert res.output == "after 3"
