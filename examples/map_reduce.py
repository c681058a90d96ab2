"""Map-reduce: a function router fans a list out with ``Send``, one batched call maps it, an agent reduces.

A function node ``split`` lists the items, one per line. The router on
``split`` (``kind: function``, ``multi: true``) returns one
``Send("mapper", item)`` per line: each becomes its own instance of the
``mapper`` agent in the next superstep, holding that item alone, and all
of them share ONE batched ``generate`` call. Every mapper sends its answer
to ``reducer`` over a static edge; the reducer runs once, in the step after,
and reads all of them.

    python examples/map_reduce.py
    python examples/map_reduce.py --items "Paris,Rome,Oslo,Lima,Cairo"

Writes runs/map_reduce/trace.jsonl.
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
from societas.topology import GraphSpec, RouteContext, RunResult, Runtime, Send

ITEMS = "apple,banana,cherry,date"
TASK = "Write one short sentence about each item of a list."


def build_spec(max_new_tokens: int) -> GraphSpec:
    """split -(Send per item)-> mapper instances -> reducer."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    return GraphSpec.from_data(
        {
            "name": "map_reduce",
            "nodes": [
                {"id": "split", "kind": "function", "function": "split"},
                {
                    "id": "mapper",
                    "role": "mapper",
                    "prompt": "Write one short sentence about the item you are given.",
                    "params": params,
                },
                {
                    "id": "reducer",
                    "role": "reducer",
                    "prompt": "Combine the sentences you are given into one short numbered list.",
                    "params": params,
                },
            ],
            "edges": ["mapper -> reducer"],
            "routers": [{"source": "split", "function": "fan_out", "targets": ["mapper"], "multi": True}],
            "entry": ["split"],
        }
    )


def fan_out(ctx: RouteContext) -> list[Send]:
    """One Send per line of the split node's output: an instance of ``mapper`` per item."""
    return [Send("mapper", line) for line in ctx.output.splitlines() if line.strip()]


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Map the items and reduce them; ``llm`` (a scripted model, in tests) replaces ``--llm``."""
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
    ap.add_argument("--items", default=ITEMS, help="comma-separated items to map")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/map_reduce", help="run directory")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    items = [x.strip() for x in args.items.split(",") if x.strip()]
    if not items:
        ap.error(f"--items: no item in {args.items!r}")

    t0 = time.perf_counter()
    model = llm if llm is not None else load_llm(args.llm)
    functions = {"split": lambda ctx: "\n".join(items), "fan_out": fan_out}
    rt = Runtime(build_spec(args.max_new_tokens), llm=model, functions=functions, seed=args.seed)
    result: RunResult = rt.run(args.task)

    mapped = [e for e in result.trace if e.sender == "mapper"]
    for e in mapped:
        print(f"[step {e.step}] mapper (batch of {e.batch_size}): {e.output.strip()}")
    reduced = result.trace.by_sender("reducer")
    print(f"--- reducer (step {reduced[-1].step}) ---\n{(result.output or '').strip()}")
    trace_path = result.trace.save_jsonl(Path(args.out) / "trace.jsonl")
    summary = {
        "example": "map_reduce",
        "items": items,
        "mapper_instances": len(mapped),
        "mapper_batch_sizes": sorted({e.batch_size for e in mapped}),
        "reducer_inputs": len(reduced[-1].meta["inputs_from"]),
        "llm_batches": result.totals["llm_batches"],
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
