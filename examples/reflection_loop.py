"""Reflection: a writer and a critic pass a draft back and forth until the critic approves.

Two agents joined in a cycle (``writer -> critic -> writer``) in message
mode: the writer starts with the task, each message reaches the other
agent in the next superstep, and the loop would go on for ever but for
the ``until`` condition — it ends as soon as the critic's message mentions
``APPROVED``, or after ``--max-messages`` messages, whichever comes first.

    python examples/reflection_loop.py
    python examples/reflection_loop.py --max-messages 4 --task "Write a haiku about rain."

Writes runs/reflection_loop/trace.jsonl.
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

TASK = "Write a two-line slogan for a bicycle repair shop."


def build_spec(max_new_tokens: int, max_messages: int) -> GraphSpec:
    """writer <-> critic, in message mode, until the critic says APPROVED (or max_messages)."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    return GraphSpec.from_data(
        {
            "name": "reflection_loop",
            "nodes": [
                {
                    "id": "writer",
                    "role": "writer",
                    "prompt": "Write the text the task asks for. If you get feedback, rewrite the text to follow it.",
                    "params": params,
                },
                {
                    "id": "critic",
                    "role": "critic",
                    "prompt": (
                        "Review the draft you are given. If it fulfils the task, reply with the single word "
                        "APPROVED. Otherwise give one short, concrete suggestion."
                    ),
                    "params": params,
                },
            ],
            "edges": ["writer -> critic", "critic -> writer"],
            "entry": ["writer"],
            "mode": "messages",
            "until": {"any": [{"mention": "APPROVED", "from": ["critic"]}, {"max_messages": max_messages}]},
        }
    )


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Run the loop; ``llm`` (a scripted model, in tests) replaces ``--llm``."""
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
    ap.add_argument("--max-messages", type=int, default=6, help="messages before the loop ends unapproved")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/reflection_loop", help="run directory")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    model = llm if llm is not None else load_llm(args.llm)
    rt = Runtime(build_spec(args.max_new_tokens, args.max_messages), llm=model, seed=args.seed)
    result: RunResult = rt.run(args.task)

    for ev in result.trace:
        print(f"--- {ev.sender} (step {ev.step}) ---\n{ev.output.strip()}\n")
    critiques = [e.output for e in result.trace if e.sender == "critic"]
    approved = any("APPROVED" in c for c in critiques)
    drafts = result.outputs["writer"]
    print(f"ended by: {result.ended_by or result.stopped}; approved: {approved}")
    trace_path = result.trace.save_jsonl(Path(args.out) / "trace.jsonl")
    summary = {
        "example": "reflection_loop",
        "approved": approved,
        "drafts": len(drafts),
        "critiques": len(critiques),
        "final_draft": drafts[-1] if drafts else None,
        "ended_by": result.ended_by,
        "stopped": result.stopped,
        "calls": result.totals["calls"],
        "tokens": result.totals["tokens"],
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
    }
    print(json.dumps(summary))
    return {**summary, "result": result}


if __name__ == "__main__":
    main()
