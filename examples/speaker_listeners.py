"""REMUL's speaker and listeners on the embedded model.

Sivakumaran et al., REMUL (arXiv 2602.16154): a speaker reasons step by
step; its reasoning is cut after 25%, 50% and 75% of its lines (here, by
default, sentences: the small embedded model writes paragraphs); three
listeners continue each cut without seeing the speaker's answer; the speaker
is rewarded by how many of the nine listener answers match its own (plus,
in the balanced variant, listeners x correctness).

    python examples/speaker_listeners.py
    python examples/speaker_listeners.py --balanced --seed 2

Writes runs/speaker_listeners/trace.jsonl and trace.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from societas.agents import load_llm
from societas.topology.patterns.remul import RemulOutcome, speaker_listeners
from societas.topology.render import render_trace_png
from societas.topology.runtime import Runtime

QUESTION = "A farmer has 3 pens with 4 sheep in each pen, then buys 5 more sheep. How many sheep does the farmer have?"
REFERENCE = "17"


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
    ap.add_argument("--listeners", type=int, default=3, help="listeners per cut")
    ap.add_argument("--speaker-tokens", type=int, default=128)
    # The paper cuts by lines; the small embedded model tends to write one paragraph, so cut by sentences.
    ap.add_argument("--unit", choices=("line", "sentence"), default="sentence", help="what a cut counts")
    ap.add_argument("--listener-tokens", type=int, default=64)
    ap.add_argument("--balanced", action="store_true", help="add listeners x correctness to the reward")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--reference", default=REFERENCE, help="the correct answer (for correctness)")
    ap.add_argument("--out", default="runs/speaker_listeners", help="run directory")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    llm = load_llm(args.llm)
    graph = speaker_listeners(
        (0.25, 0.5, 0.75),
        args.listeners,
        speaker_params={"temperature": 0.7, "max_new_tokens": args.speaker_tokens},
        listener_params={"temperature": 0.9, "max_new_tokens": args.listener_tokens},
        balanced=args.balanced,
        reference=args.reference,
        unit=args.unit,
    )
    result = Runtime(graph, llm=llm, seed=args.seed).run(args.question)
    outcome = RemulOutcome.from_result(result)

    print("speaker:\n" + result.outputs["speaker"][0].strip(), "\n")
    print(
        f"speaker answer: {outcome.speaker_answer!r} (reference {outcome.reference!r}, correct: {outcome.correct})"
    )
    for frac, answers in outcome.listener_answers.items():
        print(
            f"  cut {frac:.0%} ({outcome.cut_lines[frac]} of {outcome.reasoning_lines} {args.unit}s): "
            f"listeners said {answers}, agreement {outcome.agreement_by_cut[frac]:.2f}"
        )
    print(f"matches = {outcome.matches}/{outcome.n_pairs}  reward = {outcome.reward:.1f}")
    totals = result.totals
    out = Path(args.out)
    trace_path = result.trace.save_jsonl(out / "trace.jsonl")
    png_path = render_trace_png(result.trace, out / "trace.png", graph, title="speaker / listeners (REMUL)")
    summary = {
        "example": "speaker_listeners",
        "speaker_answer": outcome.speaker_answer,
        "matches": outcome.matches,
        "reward": outcome.reward,
        "agreement_by_cut": {str(k): v for k, v in outcome.agreement_by_cut.items()},
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
