"""A supervisor whose LLM router hands the work to specialists and back.

Three agents: a supervisor, a coder and a writer. The supervisor's output
goes through a router of kind ``llm``: the model reads the task, the
supervisor's message and what each specialist is for, and names who acts
next — ``coder``, ``writer`` or ``END`` (an answer naming none of them is
asked again once, then goes to ``END``, the router's fallback). Each
specialist reports back to the supervisor over a static edge, so the graph
loops supervisor -> specialist -> supervisor until the router picks
``END``, the supervisor writes ``FINISHED`` (the ``until`` condition), or
``--max-steps`` supersteps have run.

    python examples/supervisor.py
    python examples/supervisor.py --max-steps 5 --task "Write a function that reverses a string and a one-line docstring for it."

Writes runs/supervisor/trace.jsonl.
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

TASK = "Write a Python function that adds two numbers, then a one-sentence description of it for a README."


def build_spec(max_new_tokens: int, max_steps: int) -> GraphSpec:
    """Supervisor -> (coder | writer | END) by an LLM router; each specialist reports back."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    return GraphSpec.from_data(
        {
            "name": "supervisor",
            "nodes": [
                {
                    "id": "supervisor",
                    "role": "supervisor",
                    "prompt": (
                        "You lead a coder and a writer; you never write code or prose yourself. Read the task "
                        "and the team's work so far, and say in one sentence which part is still missing: "
                        "the code or the text. When nothing is missing, write FINISHED."
                    ),
                    "params": params,
                },
                {
                    "id": "coder",
                    "role": "coder",
                    "prompt": "You write short, correct Python code for the task. Reply with code only.",
                    "params": params,
                },
                {
                    "id": "writer",
                    "role": "writer",
                    "prompt": "You write clear, short prose for the task. Reply with the text only.",
                    "params": params,
                },
            ],
            "edges": ["coder -> supervisor", "writer -> supervisor"],
            "routers": [
                {
                    "source": "supervisor",
                    "kind": "llm",
                    "targets": ["coder", "writer", "END"],
                    "labels": {
                        "coder": "writes Python code",
                        "writer": "writes prose: descriptions, documentation",
                        "END": "the task is done: no one else needs to act",
                    },
                    "prompt": "Answer with one word: coder if code is missing, writer if text is missing, END if done.",
                    "params": {"max_new_tokens": 8},
                    "fallback": "END",
                }
            ],
            "entry": ["supervisor"],
            "until": {"mention": "FINISHED", "from": ["supervisor"]},
            "max_steps": max_steps,
        }
    )


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Run the supervised team; ``llm`` (a scripted model, in tests) replaces ``--llm``."""
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
    ap.add_argument("--max-steps", type=int, default=7, help="supersteps before the run is stopped")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/supervisor", help="run directory")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    model = llm if llm is not None else load_llm(args.llm)
    rt = Runtime(build_spec(args.max_new_tokens, args.max_steps), llm=model, seed=args.seed)
    result: RunResult = rt.run(args.task)

    routes = []
    for ev in result.trace:
        if ev.kind == "router":
            choice = json.loads(ev.output)
            routes.append(choice[0] if choice else "END")
            how = (
                " (fallback)"
                if ev.meta.get("fallback")
                else " (asked twice)"
                if ev.meta.get("retried")
                else ""
            )
            print(f"[step {ev.step}] router: {ev.meta['answer'].strip()!r} -> {routes[-1]}{how}")
        else:
            print(f"--- {ev.sender} (step {ev.step}) ---\n{ev.output.strip()}\n")
    print(f"ended by: {result.ended_by or result.stopped}")
    trace_path = result.trace.save_jsonl(Path(args.out) / "trace.jsonl")
    summary = {
        "example": "supervisor",
        "order": [e.sender for e in result.trace if e.kind != "router"],
        "routes": routes,
        "stopped": result.stopped,
        "ended_by": result.ended_by,
        "output": result.output,
        "calls": result.totals["calls"],
        "tokens": result.totals["tokens"],
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
    }
    print(json.dumps(summary))
    return {**summary, "result": result}


if __name__ == "__main__":
    main()
