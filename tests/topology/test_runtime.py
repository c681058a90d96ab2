"""Runtime semantics: supersteps, batching, rounds, visibility, budgets,
function nodes, seeds and traces — checked with scripted FunctionLLMs."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from societas.agents import FunctionLLM, UnknownLLM
from societas.topology.graph import Graph
from societas.topology.patterns import chain, debate, layered, star
from societas.topology.runtime import NodeContext, NodeError, Runtime
from societas.topology.trace import Trace


def _name_llm():
    """Answers with the sender ids it saw, so visibility is observable."""

    def fn(messages):
        user = messages[-1]["content"]
        senders = [
            line[len("### Message from ") :]
            for line in user.splitlines()
            if line.startswith("### Message from ")
        ]
        return "saw[" + ",".join(senders) + "]"

    return FunctionLLM(fn)


def test_layered_dag_runs_one_superstep_per_layer_with_one_call_each():
    g = layered([["planner"], ["coder", "coder", "coder"], ["tester"]])
    llm = _name_llm()
    res = Runtime(g, llm=llm).run("task")
    assert llm.batch_sizes == [1, 3, 1]
    steps = {e.sender: e.step for e in res.trace}
    assert steps == {"L0_0_planner": 0, "L1_0_coder": 1, "L1_1_coder": 1, "L1_2_coder": 1, "L2_0_tester": 2}
    assert res.output == "saw[L1_0_coder,L1_1_coder,L1_2_coder]"
    assert res.trace.totals().llm_batches == 3
    assert res.trace.totals().calls == 5


def test_nodes_of_one_step_do_not_see_each_other():
    # a -> c, b -> c (no edge between a and b): a and b run together; c sees both.
    g = Graph.build(
        "v",
        [{"id": "a", "role": "solver"}, {"id": "b", "role": "solver"}, {"id": "c", "role": "aggregator"}],
        [("a", "c"), ("b", "c")],
    )
    res = Runtime(g, llm=_name_llm()).run("t")
    assert res.outputs["a"] == ["saw[]"] and res.outputs["b"] == ["saw[]"]
    assert res.output == "saw[a,b]"


def test_debate_rounds_previous_round_visibility_and_receivers():
    g = debate(3, rounds=3)
    llm = _name_llm()
    res = Runtime(g, llm=llm).run("t")
    assert llm.batch_sizes == [3, 3, 3, 1]
    outs = res.outputs["debater_1"]
    assert len(outs) == 3
    assert outs[0] == "saw[]"  # round 0 sees nothing from its own component
    assert (
        outs[1]
        == "saw[debater_1 (your previous answer),debater_2 (previous round),debater_3 (previous round)]"
    )
    ev = [e for e in res.trace if e.sender == "debater_2"]
    assert ev[0].receivers == ["debater_1", "debater_2", "debater_3"]
    assert ev[-1].receivers == ["judge"]  # only the last round reaches the judge
    judge_prompt = res.trace.by_sender("judge")[0].prompt[-1]["content"]
    assert judge_prompt.count("### Message from") == 3


def test_run_many_batches_across_tasks_and_keeps_them_apart():
    g = star(4)
    llm = FunctionLLM(lambda m: "reply to: " + m[-1]["content"].split("\n")[0])
    results = Runtime(g, llm=llm).run_many(["task A", "task B", "task C"])
    assert llm.batch_sizes == [3, 12, 3]
    assert [r.output for r in results] == ["reply to: task A", "reply to: task B", "reply to: task C"]
    for r, t in zip(results, ["task A", "task B", "task C"]):
        assert all(e.prompt[-1]["content"].startswith(t) for e in r.trace)


def test_llms_are_grouped_per_object():
    a, b = _name_llm(), _name_llm()
    g = Graph.build(
        "two",
        [{"id": f"n{i}", "role": "solver", "llm": "big" if i % 2 else "small"} for i in range(4)],
        llms={"big": "embedded", "small": "embedded"},
    )
    Runtime(g, llms={"big": a, "small": b}).run("t")
    assert a.batch_sizes == [2] and b.batch_sizes == [2]


def test_call_budget_stops_cleanly():
    g = chain(["planner", "coder", "tester", "debugger"])
    res = Runtime(g, llm=_name_llm(), max_calls=2).run("t")
    assert res.stopped == "call_budget"
    assert res.output is None
    assert len(res.trace) == 2


def test_token_budget_caps_generation_and_stops():
    llm = FunctionLLM(lambda m: "word " * 50)
    g = chain(["planner", "coder", "tester"], params={"max_new_tokens": 40})
    res = Runtime(g, llm=llm, max_tokens=70).run("t")
    assert res.stopped == "token_budget"
    first = res.trace[0]
    assert first.completion_tokens == 40  # node's own cap, within the budget
    second = res.trace[1]
    assert second.completion_tokens <= 70 - first.tokens  # capped to what was left
    assert len(res.trace) == 2


def test_function_and_tool_nodes_and_state():
    calls = []

    def upper(ctx: NodeContext) -> str:
        calls.append((ctx.node, dict(ctx.inputs), ctx.round))
        ctx.state["seen"] = ctx.inputs["a"]
        return ctx.inputs["a"].upper()

    g = Graph.build(
        "f",
        [{"id": "a", "role": "solver"}, {"id": "up", "kind": "function", "function": "upper"}],
        [("a", "up")],
    )
    res = Runtime(g, llm=FunctionLLM(lambda m: "hello"), functions={"upper": upper}).run("t")
    assert res.output == "HELLO" and res.state["seen"] == "hello"
    assert calls == [("up", {"a": "hello"}, 0)]
    assert res.trace[-1].kind == "function" and res.trace[-1].prompt == []


def test_function_node_errors_name_the_node():
    def boom(ctx):
        raise KeyError("missing")

    g = Graph.build("f", [{"id": "x", "kind": "tool", "function": "boom"}])
    with pytest.raises(NodeError, match="tool node 'x'.*KeyError"):
        Runtime(g, functions={"boom": boom}).run("t")
    g2 = Graph.build("f", [{"id": "x", "kind": "tool", "function": "nowhere"}])
    with pytest.raises(ValueError, match="not given to the Runtime"):
        Runtime(g2)
    g3 = Graph.build("f", [{"id": "x", "kind": "tool", "function": "json:nope"}])
    with pytest.raises(ValueError, match="cannot import"):
        Runtime(g3)


def test_imported_function_by_path():
    g = Graph.build("f", [{"id": "x", "kind": "function", "function": "tests.topology.test_runtime:_const"}])
    assert Runtime(g).run("t").output == "const:t"


def _const(ctx):
    return "const:" + ctx.task


def test_seed_gives_distinct_reproducible_per_node_seeds():
    seen = []
    llm = FunctionLLM(lambda m, p: (seen.append(p.seed), "x")[1])
    g = star(3)
    Runtime(g, llm=llm, seed=7).run("t")
    first = list(seen)
    seen.clear()
    Runtime(g, llm=llm, seed=7).run("t")
    assert seen == first and len(set(first)) == len(first)
    seen.clear()
    Runtime(g, llm=llm, seed=8).run("t")
    assert seen != first


def test_per_node_params_travel_in_one_batch():
    seen = []
    llm = FunctionLLM(lambda m, p: (seen.append(p.max_new_tokens), "x")[1])
    g = Graph.build(
        "p",
        [
            {"id": "a", "role": "solver", "params": {"max_new_tokens": 5}},
            {"id": "b", "role": "solver", "params": {"max_new_tokens": 9, "temperature": 0.0}},
        ],
    )
    Runtime(g, llm=llm).run("t")
    assert llm.batch_sizes == [2] and sorted(seen) == [5, 9]


def test_trace_jsonl_round_trip(tmp_path):
    g = debate(2, rounds=2)
    res = Runtime(g, llm=_name_llm()).run("t", trace_path=tmp_path / "t.jsonl")
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["meta"]["task"] == "t"
    assert len(lines) == 1 + len(res.trace)
    back = Trace.load_jsonl(tmp_path / "t.jsonl")
    assert [e.to_dict() for e in back] == [e.to_dict() for e in res.trace]
    assert back.totals().to_dict() == res.trace.totals().to_dict()
    (tmp_path / "bad.jsonl").write_text('{"meta": {}}\n{"nope": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        Trace.load_jsonl(tmp_path / "bad.jsonl")


def test_unresolvable_llm_uri_is_reported():
    g = Graph.build("u", [{"id": "a", "role": "solver"}], llms={"default": "function:nowhere_module:fn"})
    with pytest.raises(
        UnknownLLM, match="cannot import nowhere_module:fn .*No module named 'nowhere_module'"
    ):
        Runtime(g)


def _comparable(res):
    """A run's observable result, without wall-clock timings."""
    events = [{k: v for k, v in e.to_dict().items() if k != "latency_s"} for e in res.trace]
    meta = {k: v for k, v in res.trace.meta.items() if k != "wall_s"}
    return {"output": res.output, "outputs": res.outputs, "state": res.state, "meta": meta, "events": events}


def test_two_threads_share_one_runtime_and_get_their_sequential_traces():
    # A debate block feeding a function node and a judge: rounds, function
    # state, trace access and seeds all take part in what each run records.
    g = Graph.build(
        "threads",
        [
            {"id": "a", "role": "solver"},
            {"id": "b", "role": "solver"},
            {"id": "tally", "kind": "function", "function": "tally"},
            {"id": "judge", "role": "aggregator"},
        ],
        [("a", "b"), ("b", "a"), ("a", "tally"), ("b", "tally"), ("tally", "judge")],
        rounds=2,
    )
    barrier = threading.Barrier(2)
    interleave = threading.Event()
    waited = threading.local()

    def reply(messages, params):
        # Each thread's first call waits for the other thread's, so both runs
        # are in flight at once; the sleep hands the interpreter back and forth.
        if interleave.is_set() and not getattr(waited, "done", False):
            waited.done = True
            barrier.wait(timeout=10)
        time.sleep(0.002)
        return f"seed={params.seed} " + " ".join(messages[-1]["content"].split()[:3])

    def tally(ctx: NodeContext) -> str:
        ctx.state["tallies"] = ctx.state.get("tallies", 0) + 1
        return f"{len(ctx.trace)} events; inputs {sorted(ctx.inputs)}"

    rt = Runtime(g, llm=FunctionLLM(reply), functions={"tally": tally}, seed=7)
    jobs = [(("alpha task", "beta task"), [101, 202]), (("gamma task",), None)]
    expected = [[_comparable(r) for r in rt.run_many(tasks, seeds=seeds)] for tasks, seeds in jobs]
    agent_outputs = [
        e["output"] for runs in expected for r in runs for e in r["events"] if e["kind"] == "agent"
    ]
    assert agent_outputs and not any(o.startswith("seed=None") for o in agent_outputs)  # seeds are observable

    before = dict(vars(rt))
    interleave.set()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(rt.run_many, tasks, seeds=seeds) for tasks, seeds in jobs]
        got = [[_comparable(r) for r in f.result(timeout=30)] for f in futures]
    assert got == expected
    assert vars(rt) == before  # a run leaves nothing behind on the Runtime


@pytest.mark.slow
def test_embedded_model_star_batches_workers(embedded_llm):
    g = star(3, params={"max_new_tokens": 16, "temperature": 0.0})
    calls0 = embedded_llm.calls
    res = Runtime(g, llm=embedded_llm).run("Name a prime number.")
    assert embedded_llm.calls - calls0 == 3  # hub, 3 workers in one call, aggregator
    assert res.output and res.trace.totals().completion_tokens > 0
    assert [e.batch_size for e in res.trace] == [1, 3, 3, 3, 1]
