"""Smoke tests of benchmarks/dynamic_graphs.py: it runs, prints its tables and ends with one JSON line.

No speed is asserted. The ReAct comparison runs in-process on a scripted
FunctionLLM that calls tools (the embedded model seldom does), which checks
what the comparison rests on: both sides send the same prompts turn by turn,
run the same tool calls and count the same tokens, societas in one batched
call per step and LangGraph one prompt per call.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from societas.agents import FunctionLLM

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "dynamic_graphs.py"

LOOP_KEYS = (
    "router_societas_us_per_step",
    "router_langgraph_us_per_step",
    "router_overhead_ratio_vs_langgraph",
    "checkpoint_societas_us_per_step",
    "checkpoint_langgraph_us_per_step",
    "checkpoint_overhead_ratio_vs_langgraph",
)
REACT_KEYS = ("react_batched_speedup_vs_langgraph", "react_societas_tok_s", "react_langgraph_tok_s")


def _bench():
    spec = importlib.util.spec_from_file_location("dynamic_graphs_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _positive(head, keys):
    for k in keys:
        v = head[k]
        assert isinstance(v, int | float) and math.isfinite(v) and v > 0, (k, v)


def _script(messages):
    """Turn 0 calls add, turn 1 calls multiply and an unknown tool, turn 2 answers."""
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        return 'Adding. <tool_call>{"name": "add", "arguments": {"a": 2, "b": 40}}</tool_call>'
    if turn == 1:
        assert '"content": "42.0"' in messages[-1]["content"]
        return (
            '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'
            '<tool_call>{"name": "divide", "arguments": {}}</tool_call>'
        )
    return "The answer is 42."


@pytest.mark.slow
def test_quick_run_without_the_model_prints_the_table_and_json():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-react"],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    head = json.loads(lines[-1])
    assert head["benchmark"] == "dynamic_graphs" and head["quick"] is True and head["steps"] == 20
    _positive(head, LOOP_KEYS)
    assert head["react"] == "skipped (--no-react)"
    assert all(head[k] is None for k in REACT_KEYS)
    assert "| 20-step router loop, median of 2 | societas us/step | LangGraph us/step |" in proc.stdout
    assert "| no checkpointer |" in proc.stdout and "| SQLite checkpoint every step |" in proc.stdout
    # a checkpoint after every one of the 20 steps on the societas side
    assert "Checkpoints written per run: societas 20," in proc.stdout


def test_react_sides_do_the_same_work_and_only_societas_batches():
    bench = _bench()
    llm = FunctionLLM(_script)
    rx = bench.react(llm, 3, 32, 3, "both")
    ours, runs = rx["societas"], rx["langgraph"]
    assert [r["mode"] for r in runs] == ["batch", "sequential"]
    # 3 agents x 3 turns; add, then multiply (the unknown tool is a parse error, not a call)
    assert ours["turns"] == 9 and all(r["turns"] == 9 for r in runs)
    assert ours["tool_calls"] == 6 and all(r["tool_calls"] == 6 for r in runs)
    assert ours["tokens"] > 0 and all(r["tokens"] == ours["tokens"] for r in runs)
    assert rx["same_first_prompts"] == 1.0 and rx["same_prompts"] == 1.0 and rx["same_outputs"] == 1.0
    # the third prompt carries the tool result and the parse error, identically on both sides
    last_prompt = ours["transcripts"][0][2][0][-1]["content"]
    assert '"content": "42.0"' in last_prompt and "unknown tool 'divide'" in last_prompt
    # warm-up (one prompt, then all), then societas: one call of 3 prompts per step; LangGraph: 9 single-prompt calls per mode
    assert llm.batch_sizes == [1, 3] + [3, 3, 3] + [1] * 18
    assert ours["generate_calls"] == 3
    assert math.isfinite(rx["speedup"]) and rx["speedup"] > 0


def test_react_turn_limit_ends_the_agent_on_both_sides_alike():
    bench = _bench()
    always = FunctionLLM(
        lambda m: 'again <tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>'
    )
    rx = bench.react(always, 2, 16, 2, "sequential")
    # 2 turns each: the first call runs, the second turn hits the limit and its call does not run
    assert rx["societas"]["turns"] == 4 and rx["langgraph"][0]["turns"] == 4
    assert rx["societas"]["tool_calls"] == 2 and rx["langgraph"][0]["tool_calls"] == 2
    assert rx["same_prompts"] == 1.0


@pytest.mark.slow
def test_main_in_process_reports_the_react_table_and_keys(capsys):
    bench = _bench()
    head = bench.main(
        ["--quick", "--steps", "5", "--repeats", "1", "--agents", "2", "--react-tokens", "64"]
        + ["--langgraph-mode", "sequential"],
        llm_factory=lambda: FunctionLLM(_script),
    )
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == head
    _positive(head, LOOP_KEYS + REACT_KEYS)
    assert head["react"] == "measured" and head["react_langgraph_mode"] == "sequential"
    assert head["react_societas_tool_calls"] == head["react_langgraph_tool_calls"] == 4
    assert head["react_agents"] == 2 and head["react_tokens"] == 64
    assert "| societas, run_many, batched turns (3 generate calls) |" in out
    assert "| LangGraph, invoke, one after another, one prompt per generate call |" in out
    assert "same prompts in all turns 100%" in out
