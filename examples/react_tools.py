"""A ReAct agent that calls the calculator and a sandboxed Python interpreter.

One agent node lists the built-in tools ``calculator`` and ``python`` (the
second runs code under bubblewrap, with no network and a time limit). Each
superstep is one model turn: when the model writes
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, the
Runtime runs the calls, hands the results back inside ``<tool_response>``
blocks and the agent continues in the next step, until it answers without a
call or reaches ``max_tool_steps``. The run is streamed, so each tool call
and its result print as they happen.

    python examples/react_tools.py
    python examples/react_tools.py --task "What is 2**20 - 1?" --max-tool-steps 3

The small embedded model seldom writes a well-formed call; a larger model
(``--llm hf:PATH`` or ``--llm openai:URL#MODEL``) follows the protocol.
Writes runs/react_tools/trace.jsonl.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from societas.agents import load_llm
from societas.agents.llm import LLM
from societas.topology import GraphSpec, RunResult, Runtime

TASK = (
    "A warehouse stacks 17 rows of 23 boxes and has 5 loose boxes. How many boxes are there? "
    "Compute it with the calculator, then check it by printing the value with python."
)

PROMPT = (
    "You solve arithmetic problems with tools. Call one tool per turn, for example:\n"
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2*(3+4)"}}</tool_call>\n'
    "When you have the result, answer in one sentence without any tool call."
)


def build_spec(max_new_tokens: int, max_tool_steps: int) -> GraphSpec:
    """One tool-calling agent with the built-in calculator and sandboxed Python tools."""
    return GraphSpec.from_data(
        {
            "name": "react_tools",
            "nodes": [
                {
                    "id": "solver",
                    "role": "solver",
                    "prompt": PROMPT,
                    "tools": ["calculator", "python"],
                    "max_tool_steps": max_tool_steps,
                    "params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
                }
            ],
        }
    )


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Run the agent; ``llm`` (a scripted model, in tests) replaces ``--llm``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", default="embedded", help="LLM URI (default: the embedded model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0 = torch default; 1 is faster when other processes load the cores)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--max-tool-steps", type=int, default=4, help="model turns the agent may take")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/react_tools", help="run directory")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    model = llm if llm is not None else load_llm(args.llm)
    rt = Runtime(build_spec(args.max_new_tokens, args.max_tool_steps), llm=model, seed=args.seed)
    result: RunResult | None = None
    for ev in rt.stream(args.task):
        if ev.type == "tool_call" and ev.event is not None:
            calls = ev.event.meta.get("tool_calls", [])
            shown = ", ".join(f"{c['name']}({json.dumps(c['arguments'])})" for c in calls)
            print(f"[step {ev.step}] {ev.node} calls {shown or 'nothing readable'}")
        elif ev.type == "tool_result" and ev.event is not None:
            print(f"[step {ev.step}] {ev.event.meta['tool']} -> {ev.event.output.strip()}")
        elif ev.type == "run_end":
            result = ev.data["result"]
    assert result is not None  # stream always ends with run_end

    calls = [
        {
            "tool": e.meta["tool"],
            "arguments": e.meta["arguments"],
            "result": e.output,
            "error": e.meta["tool_error"],
        }
        for e in result.trace
        if e.kind == "tool_call"
    ]
    final = [e for e in result.trace if e.kind == "agent" and not e.meta.get("partial")]
    print("answer:", (result.output or "").strip())
    trace_path = result.trace.save_jsonl(Path(args.out) / "trace.jsonl")
    summary = {
        "example": "react_tools",
        "answer": result.output,
        "tool_calls": calls,
        "turns": len([e for e in result.trace if e.kind == "agent"]),
        "tool_steps_exhausted": bool(final and final[-1].meta.get("tool_steps_exhausted")),
        "calls": result.totals["calls"],
        "tokens": result.totals["tokens"],
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
    }
    print(json.dumps(summary))
    return {**summary, "result": result}


if __name__ == "__main__":
    main()
