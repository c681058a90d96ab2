"""Dr. Zero's proposer/solver round on the embedded model.

Yue et al., "Dr. Zero: Self-Evolving Search Agents without Training Data"
(arXiv 2601.07055): a proposer writes a question and its answer, a solver
answers it n = 5 times, and the proposer earns the difficulty reward
(5 - k) / 4 for 0 < k < 5 correct answers plus half its format score. Here
the verifiable domain is arithmetic word problems; the solvers never see the
proposer's answer. Several proposals run in lockstep (Runtime.run_many), so
all proposers share one batched model call and all solvers another — the
group of rewards a proposer's policy-gradient step would use.

    python examples/proposer_solver.py
    python examples/proposer_solver.py --proposals 8 --seed 3

Writes runs/proposer_solver/trace_<i>.jsonl and trace.png (the best-rewarded run).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from societas.agents import load_llm
from societas.topology.patterns.arithmetic import arithmetic_word_problem_task
from societas.topology.patterns.selfplay import ProposerSolverOutcome, proposer_solver
from societas.topology.render import render_trace_png
from societas.topology.runtime import Runtime


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
    ap.add_argument("--proposals", type=int, default=4, help="proposer samples, run together")
    ap.add_argument("--solvers", type=int, default=5, help="solver attempts per question (the paper uses 5)")
    ap.add_argument("--proposer-tokens", type=int, default=64)
    ap.add_argument("--solver-tokens", type=int, default=64)
    ap.add_argument("--out", default="runs/proposer_solver", help="run directory")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    llm = load_llm(args.llm)
    graph = proposer_solver(
        args.solvers,
        proposer_params={"temperature": 0.9, "max_new_tokens": args.proposer_tokens},
        solver_params={"temperature": 0.8, "max_new_tokens": args.solver_tokens},
        solver_seed=args.seed,
    )
    rng = random.Random(args.seed)
    tasks = [arithmetic_word_problem_task(rng) for _ in range(args.proposals)]
    results = Runtime(graph, llm=llm, seed=args.seed).run_many(tasks)
    outcomes = [ProposerSolverOutcome.from_result(r) for r in results]

    out = Path(args.out)
    for i, (res, oc) in enumerate(zip(results, outcomes, strict=True)):
        print(f"=== proposal {i} ===")
        print("proposer wrote:", res.outputs["proposer"][0].strip()[:300])
        print(f"question: {oc.question!r}\nanswer: {oc.answer!r}")
        print("solver answers:", [a if a is None else a[:40] for a in oc.solver_answers])
        print(
            f"k = {oc.k}/{oc.n}  difficulty = {oc.difficulty:.2f}  format = {oc.format:.2f}  "
            f"reward = {oc.reward:.2f}  verified = {oc.verified}"
        )
        if oc.format_problems:
            print("format problems:", "; ".join(oc.format_problems))
        res.trace.save_jsonl(out / f"trace_{i}.jsonl")
    best = max(range(len(results)), key=lambda i: outcomes[i].reward)
    png_path = render_trace_png(
        results[best].trace, out / "trace.png", graph, title=f"proposer / solvers (Dr. Zero), proposal {best}"
    )
    calls = sum(r.totals["calls"] for r in results)
    tokens = sum(r.totals["tokens"] for r in results)
    summary = {
        "example": "proposer_solver",
        "rewards": [round(o.reward, 3) for o in outcomes],
        "formats": [round(o.format, 3) for o in outcomes],
        "k": [o.k for o in outcomes],
        "calls": calls,
        "llm_batches": results[0].totals["llm_batches"],  # run in lockstep, the runs share every batch
        "tokens": tokens,
        "run_wall_s": round(max(r.totals["wall_s"] for r in results), 2),
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "traces": str(out),
        "png": str(png_path),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
