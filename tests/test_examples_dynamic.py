"""The dynamic-graph examples (tools, routers, fan-out, loops, approvals, durable runs, learned
routing): each checked with a scripted FunctionLLM on the behaviour it demonstrates, and all of
them run once on the embedded model."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from societas.agents import FunctionLLM
from societas.agents.sandbox import bwrap_required, bwrap_status
from societas.topology import END, RouteContext, RunResult

ROOT = Path(__file__).resolve().parents[1]


@cache
def example(name: str) -> ModuleType:
    """The example script ``examples/<name>.py`` as a module."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"societas_example_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _turn(messages) -> int:
    """How many turns of its own the model already took in this conversation."""
    return sum(1 for m in messages if m["role"] == "assistant")


def _tool_contents(text: str) -> list[str]:
    """The ``content`` of every ``<tool_response>`` block of a message."""
    blocks = re.findall(r"<tool_response>\s*(\{.*?\})\s*</tool_response>", text, flags=re.S)
    return [json.loads(b)["content"] for b in blocks]


def _is_router_prompt(messages) -> bool:
    return messages[0]["content"].startswith("You route messages")


# -- react_tools ---------------------------------------------------------------------------------

BWRAP = bwrap_status()


@pytest.mark.bwrap
@pytest.mark.skipif(
    not bwrap_required() and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
)
def test_react_agent_calls_both_tools_and_answers_with_their_result(tmp_path, capsys):
    prompts = []

    def fn(messages):
        prompts.append(messages)
        turn = _turn(messages)
        if turn == 0:
            return '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23+5"}}</tool_call>'
        if turn == 1:
            assert _tool_contents(messages[-1]["content"]) == ["396"]
            return (
                '<tool_call>{"name": "python", "arguments": {"code": "print(sum([17*23, 5]))"}}</tool_call>'
            )
        (checked,) = _tool_contents(messages[-1]["content"])
        return f"There are {checked} boxes."

    out = example("react_tools").main(["--out", str(tmp_path)], llm=FunctionLLM(fn))
    assert [(c["tool"], c["result"], c["error"]) for c in out["tool_calls"]] == [
        ("calculator", "396", False),
        ("python", "396", False),  # run in the sandbox, not computed by the script
    ]
    assert out["answer"] == "There are 396 boxes." and out["turns"] == 3
    assert "<tools>" in prompts[0][0]["content"] and '"python"' in prompts[0][0]["content"]
    printed = capsys.readouterr().out
    assert "calculator -> 396" in printed and "python -> 396" in printed  # streamed as they happened
    assert (tmp_path / "trace.jsonl").is_file()


# -- supervisor ------------------------------------------------------------------------------------


def _supervisor_llm(route_answers):
    answers = iter(route_answers)
    router_prompts = []

    def fn(messages):
        if _is_router_prompt(messages):
            router_prompts.append(messages)
            return next(answers)
        system = messages[0]["content"]
        if system.startswith("You lead"):
            return "The code or the text is still missing."
        if "Python code" in system:
            return "def add(a, b):\n    return a + b"
        return "add(a, b) returns the sum of two numbers."

    return FunctionLLM(fn), router_prompts


def test_supervisor_llm_router_sends_work_to_specialists_and_ends(tmp_path):
    llm, router_prompts = _supervisor_llm(["coder", "The writer should do it.", "END"])
    out = example("supervisor").main(["--out", str(tmp_path)], llm=llm)
    assert out["order"] == ["supervisor", "coder", "supervisor", "writer", "supervisor"]
    assert out["routes"] == ["coder", "writer", "END"]
    assert out["stopped"] is None and out["ended_by"] == "no messages left"
    # the router saw the specialists' descriptions and, the second time, the coder's work
    assert "writes Python code" in router_prompts[0][-1]["content"]
    res = out["result"]
    sup_inputs = [e.meta["inputs_from"] for e in res.trace if e.sender == "supervisor" and e.kind == "agent"]
    assert sup_inputs == [[], ["coder"], ["writer"]]


def test_supervisor_loop_is_bounded_by_max_steps(tmp_path):
    llm, _ = _supervisor_llm(["coder"] * 20)
    out = example("supervisor").main(["--out", str(tmp_path), "--max-steps", "5"], llm=llm)
    assert out["stopped"] == "max_steps"
    assert out["order"] == ["supervisor", "coder", "supervisor", "coder", "supervisor"]


def test_supervisor_ends_when_the_supervisor_says_finished(tmp_path):
    def fn(messages):
        if _is_router_prompt(messages):
            return "coder"
        if messages[0]["content"].startswith("You lead"):
            return "FINISHED" if "Message from coder" in messages[-1]["content"] else "Code is missing."
        return "def add(a, b): return a + b"

    out = example("supervisor").main(["--out", str(tmp_path)], llm=FunctionLLM(fn))
    assert out["order"] == ["supervisor", "coder", "supervisor"]
    assert out["stopped"] is None and out["ended_by"].startswith("condition")


# -- map_reduce ------------------------------------------------------------------------------------


def test_map_reduce_fans_out_one_instance_per_item_in_one_batched_call(tmp_path):
    items = ["Paris", "Rome", "Oslo", "Lima", "Cairo"]
    reducer_prompts = []

    def batch(prompts):
        replies = []
        for m in prompts:
            if m[0]["content"].startswith("Combine"):
                reducer_prompts.append(m)
                replies.append("REDUCED")
            else:
                (item,) = [x for x in items if x in m[-1]["content"]]  # each instance holds its item alone
                replies.append(f"{item} has {len(item)} letters.")
        return replies

    llm = FunctionLLM(batch_fn=batch)
    out = example("map_reduce").main(["--out", str(tmp_path), "--items", ",".join(items)], llm=llm)
    assert llm.batch_sizes == [len(items), 1]  # all mappers in one call, then the reducer
    assert out["mapper_instances"] == len(items) and out["mapper_batch_sizes"] == [len(items)]
    assert out["reducer_inputs"] == len(items) and out["output"] == "REDUCED"
    (prompt,) = reducer_prompts
    for item in items:
        assert f"{item} has {len(item)} letters." in prompt[-1]["content"]


# -- reflection_loop -------------------------------------------------------------------------------


def _reflection_llm(approve_at):
    seen = {"critic": 0, "writer": 0}

    def fn(messages):
        if messages[0]["content"].startswith("Review"):
            seen["critic"] += 1
            return "APPROVED" if seen["critic"] == approve_at else "Make it rhyme."
        seen["writer"] += 1
        return f"draft {seen['writer']}"

    return FunctionLLM(fn)


def test_reflection_loop_ends_when_the_critic_approves(tmp_path):
    out = example("reflection_loop").main(["--out", str(tmp_path)], llm=_reflection_llm(approve_at=2))
    res = out["result"]
    assert [e.sender for e in res.trace] == ["writer", "critic", "writer", "critic"]
    assert out["approved"] and out["final_draft"] == "draft 2"
    assert res.ended_by.startswith("condition") and res.output == "APPROVED"


def test_reflection_loop_stops_after_max_messages_without_approval(tmp_path):
    out = example("reflection_loop").main(
        ["--out", str(tmp_path), "--max-messages", "5"], llm=_reflection_llm(approve_at=-1)
    )
    assert not out["approved"] and out["drafts"] == 3 and out["critiques"] == 2
    assert out["ended_by"].startswith("condition")


# -- approval --------------------------------------------------------------------------------------


def _approval_llm():
    def fn(messages):
        if _turn(messages) == 0:
            return '<tool_call>{"name": "save_note", "arguments": {"name": "shopping.txt", "text": "milk"}}</tool_call>'
        (result,) = _tool_contents(messages[-1]["content"])
        return f"Tool said: {result}"

    return FunctionLLM(fn)


@pytest.mark.parametrize("checkpointer", ["memory", "sqlite"])
def test_approval_refused_call_does_not_run_and_approved_call_does(tmp_path, checkpointer):
    run = example("approval").main
    no = run(
        ["--out", str(tmp_path / "no"), "--approve", "no", "--checkpointer", checkpointer],
        llm=_approval_llm(),
    )
    note = {"name": "shopping.txt", "text": "milk"}
    assert no["approvals"] == [{"tool": "save_note", "arguments": note, "answer": "no"}]
    assert no["saved_notes"] == [] and not (tmp_path / "no" / "notes" / "shopping.txt").exists()
    assert no["tool_calls"][0]["result"].startswith("Error: the person did not approve")
    assert no["output"].startswith("Tool said: Error: the person did not approve")

    yes = run(
        ["--out", str(tmp_path / "yes"), "--approve", "yes", "--checkpointer", checkpointer],
        llm=_approval_llm(),
    )
    assert yes["saved_notes"] == ["shopping.txt"]
    assert (tmp_path / "yes" / "notes" / "shopping.txt").read_text() == "milk"
    assert yes["output"] == "Tool said: saved 4 characters to shopping.txt"
    assert yes["result"].stopped is None and yes["checkpoints"][0] == 0
    if checkpointer == "sqlite":
        assert (tmp_path / "yes" / "approval.db").is_file()


def test_approval_asks_on_a_terminal_and_refuses_to_guess_without_one(tmp_path, monkeypatch, capsys):
    run = example("approval").main
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    questions = []
    monkeypatch.setattr("builtins.input", lambda q: questions.append(q) or "yes")
    out = run(["--out", str(tmp_path / "tty")], llm=_approval_llm())
    assert len(questions) == 1 and "save_note" in questions[0]
    assert out["saved_notes"] == ["shopping.txt"]

    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    with pytest.raises(SystemExit) as exc:
        run(["--out", str(tmp_path / "pipe")], llm=_approval_llm())
    assert exc.value.code == 2
    assert "pass --approve yes or --approve no" in capsys.readouterr().err
    assert not (tmp_path / "pipe" / "notes").exists()


# -- durable_run -----------------------------------------------------------------------------------


def durable_reply(messages) -> str:
    """The scripted model of the durable-run test (loaded by the child as function:MODULE:ATTR)."""
    system = messages[0]["content"]
    if system.startswith("List three"):
        return "1. scattering\n2. wavelengths\n3. atmosphere"
    if system.startswith("Write the answer"):
        return "Rayleigh scattering sends short wavelengths across the atmosphere."
    assert "(8 words)" in messages[-1]["content"]  # the measure node's output, computed after the resume
    return "Why the Sky Is Blue"


def test_durable_run_resumes_after_sigkill_and_runs_each_node_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    uri = f"function:{__name__}:durable_reply"
    assert __name__ == "tests.test_examples_dynamic"  # the child imports this module by that name
    out = example("durable_run").main(["--out", str(tmp_path), "--llm", uri, "--kill-step", "1"])
    assert out["checkpoints_before_resume"] == [0]  # the child died in step 1, after saving step 0
    assert out["executions"] == dict.fromkeys(["outline", "keywords", "draft", "measure", "title"], 1)
    # the child completed step 0 only; the parent ran the killed step and the rest
    assert out["ran_in"] == {
        "outline": "child",
        **dict.fromkeys(["keywords", "draft", "measure", "title"], "parent"),
    }
    assert [c["step"] for c in out["checkpoints"]] == [0, 1, 2, 3, 4] and out["checkpoints"][-1]["finished"]
    assert out["output"] == "Why the Sky Is Blue" and out["stopped"] is None
    assert (tmp_path / "killed.marker").is_file()
    res = out["result"]
    assert res.outputs["keywords"] == ["keywords: atmosphere, scattering, wavelengths"]


# -- learned_routing -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["gptswarm", "gdesigner"])
def test_learned_routing_decisions_follow_the_policy_probabilities(tmp_path, method):
    from societas.marl.routing import (
        PolicyRouter,
        RoutingEnv,
        RoutingEnvConfig,
        load_policy,
        skill_agents_llm,
    )

    env = RoutingEnv(RoutingEnvConfig(n_agents=5, n_types=2, facts_per_task=1), device="cpu")
    out = example("learned_routing").main(
        ["--out", str(tmp_path), "--method", method, "--train-steps", "20"], llm=skill_agents_llm(env)
    )
    decisions = out["decisions"]
    assert decisions and out["threshold"] == 0.5
    policy, penv = load_policy(out["policy"])
    assert penv.config == env.config
    names = list(env.profile.names)
    check = PolicyRouter.from_checkpoint(out["policy"])
    for d in decisions:
        i = names.index(d["source"])
        targets = (*names[i + 1 :], END)
        assert list(d["probabilities"]) == list(targets)
        ctx = RouteContext(
            source=d["source"], output="", task=out["task"], targets=targets, step=0, instance=0
        )
        want = check.explain(ctx)
        for t in targets:
            assert d["probabilities"][t] == pytest.approx(want[t], abs=1e-6)
        if method == "gptswarm":  # the sigmoid of the saved logits, independently of the router
            probs = policy.edge_probs().detach()
            for t in targets[:-1]:
                assert d["probabilities"][t] == pytest.approx(float(probs[i, names.index(t)]), abs=1e-6)
        edge_p = [d["probabilities"][t] for t in targets[:-1]]
        assert d["probabilities"][END] == pytest.approx(math.prod(1 - p for p in edge_p), abs=1e-6)
        sent = [t for t in targets[:-1] if d["probabilities"][t] >= 0.5]
        assert d["chosen"] == (sent or [END])
    # every routed message reached its target: each chosen member ran in the next step
    res = out["result"]
    for d in decisions:
        for t in d["chosen"]:
            if t != END:
                assert any(e.sender == t and e.step == d["step"] + 1 for e in res.trace if e.kind == "agent")
    assert isinstance(out["correct"], bool)


# -- all of them on the embedded model --------------------------------------------------------------

EMBEDDED_RUNS = {
    "react_tools": ["--max-new-tokens", "24", "--max-tool-steps", "2"],
    "supervisor": ["--max-new-tokens", "16", "--max-steps", "3"],
    "map_reduce": ["--max-new-tokens", "12", "--items", "apple,kiwi,fig"],
    "reflection_loop": ["--max-new-tokens", "16", "--max-messages", "2"],
    "approval": ["--max-new-tokens", "32", "--approve", "no"],
    "durable_run": ["--max-new-tokens", "12", "--kill-step", "1"],
    "learned_routing": ["--max-new-tokens", "12", "--train-steps", "10"],
}


@pytest.mark.slow
def test_every_dynamic_example_runs_on_the_embedded_model(tmp_path, embedded_llm):
    import torch

    del embedded_llm  # loaded once: the examples' load_llm("embedded") returns the same shared model
    threads = torch.get_num_threads()
    try:
        for name, argv in EMBEDDED_RUNS.items():
            # one torch thread: the examples run in seconds even while other processes load the cores
            out = example(name).main([*argv, "--threads", "1", "--out", str(tmp_path / name)])
            assert out["example"] == name
            assert isinstance(out["result"], RunResult), name
            assert out["result"].stopped in (None, "max_steps"), (name, out["result"].stopped)
            json.loads((tmp_path / name / "trace.jsonl").read_text().splitlines()[0])
    finally:
        torch.set_num_threads(threads)
