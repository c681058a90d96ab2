"""A society of thought on the embedded model, with its conversational behaviours.

Kim et al., "Reasoning Models Generate Societies of Thought" (arXiv
2601.10825), find that reasoning traces read like a discussion among
perspectives with different personalities and expertise, and code four
behaviours in them: question-answering, perspective shifts, conflict and
reconciliation. This script runs such a discussion explicitly — a few
personas, fully connected, for a few rounds, then an aggregator — and counts
the behaviours with the lexical classifier.

    python examples/society_of_thought.py
    python examples/society_of_thought.py --personas 4 --rounds 2 --seed 1

Writes runs/society_of_thought/trace.jsonl and trace.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from societas.agents import load_llm
from societas.topology.patterns.society import society_of_thought
from societas.topology.patterns.society_behaviours import count_behaviours
from societas.topology.render import render_trace_png
from societas.topology.runtime import Runtime

TASK = (
    "A shop sells pencils in packs of 6. Maria buys 4 packs and gives 5 pencils to her brother. "
    "How many pencils does Maria have left?"
)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", default="embedded", help="LLM URI (default: the embedded model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0 = torch default; 1 is faster when other processes load the cores)",
    )
    ap.add_argument("--personas", type=int, default=3, help="number of default personas (2-8)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/society_of_thought", help="run directory")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    llm = load_llm(args.llm)
    graph = society_of_thought(
        args.personas,
        args.rounds,
        params={"temperature": 0.7, "max_new_tokens": args.max_new_tokens},
        aggregator_params={"temperature": 0.0, "max_new_tokens": args.max_new_tokens},
    )
    result = Runtime(graph, llm=llm, seed=args.seed).run(args.task)
    counts = count_behaviours(result.trace)

    for ev in result.trace:
        print(f"--- {ev.sender} (round {ev.round}) ---\n{ev.output.strip()}\n")
    print("final output:", (result.output or "").strip())
    print("behaviours:", json.dumps(counts.counts))
    for pair in counts.qa_pairs:
        print(f"  Q&A: {pair.asker} asked {pair.question!r}; {pair.replier} answered {pair.answer!r}")
    totals = result.totals
    out = Path(args.out)
    trace_path = result.trace.save_jsonl(out / "trace.jsonl")
    title = f"society of thought ({args.personas} personas, {args.rounds} rounds)"
    png_path = render_trace_png(result.trace, out / "trace.png", graph, title=title)
    summary = {
        "example": "society_of_thought",
        "behaviours": counts.counts,
        "calls": totals["calls"],
        "llm_batches": totals["llm_batches"],
        "tokens": totals["tokens"],
        "run_wall_s": round(totals["wall_s"], 2),
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
        "png": str(png_path),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
