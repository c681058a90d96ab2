"""AgentConductor on a HumanEval problem, with sandboxed unit tests.

The orchestrator writes a layered YAML topology for the problem, the Runtime
runs it with the worker model, a tool node runs HumanEval's unit tests in the
sandbox, and on failure the feedback goes back to the orchestrator for a
revised topology (at most --turns turns).

    python examples/conductor_humaneval.py                     # embedded model, HumanEval/2
    python examples/conductor_humaneval.py --task HumanEval/0 --llm openai:http://localhost:8000/v1#Qwen2.5-3B-Instruct

The embedded 135M model rarely writes valid YAML or correct code: the point
here is the loop and what it records (the outcome a reward would grade).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from societas.agents import SamplingParams, load_llm
from societas.topology.coding import humaneval_tasks
from societas.topology.patterns import Conductor
from societas.topology.render import render_graph_png, render_trace_png


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="HumanEval/2")
    ap.add_argument("--llm", default="embedded", help="orchestrator and worker model URI")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orchestrator-tokens", type=int, default=160)
    ap.add_argument("--worker-tokens", type=int, default=160)
    ap.add_argument("--out", default="runs/conductor")
    args = ap.parse_args()

    tasks = {t.task_id: t for t in humaneval_tasks()}
    if args.task not in tasks:
        raise SystemExit(f"unknown task {args.task!r}; HumanEval ids run from HumanEval/0 to HumanEval/163")
    task = tasks[args.task]
    llm = load_llm(args.llm)
    conductor = Conductor(
        llm,
        llm,
        max_turns=args.turns,
        orchestrator_params=SamplingParams(temperature=0.7, max_new_tokens=args.orchestrator_tokens),
        worker_params={"temperature": 0.2, "max_new_tokens": args.worker_tokens},
        seed=args.seed,
    )
    t0 = time.perf_counter()
    result = conductor.run(task)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{task.task_id} ({task.difficulty})")
    for turn in result.turns:
        print(f"\n--- turn {turn.turn}: {turn.outcome}")
        print(turn.orchestrator_output.strip()[:600])
        if turn.parse_message:
            print(f"[parse] {turn.parse_message}")
        if turn.run is not None:
            print(f"[topology] {turn.metrics}")
            turn.run.trace.save_jsonl(out / f"turn{turn.turn}.jsonl")
            render_trace_png(
                turn.run.trace, out / f"turn{turn.turn}.png", graph=conductor.build_graph(turn.topology, task)
            )
            render_graph_png(conductor.build_graph(turn.topology, task), out / f"topology{turn.turn}.png")
        if turn.test is not None:
            print(f"[tests] {turn.test.outcome}: {turn.test.feedback.splitlines()[0]}")
    summary = result.to_dict()
    (out / "result.json").write_text(json.dumps(summary, indent=2))
    print(
        f"\npassed={result.passed} turns={len(result.turns)} tokens={result.tokens} wall={time.perf_counter() - t0:.1f}s"
    )
    print(f"files in {out}/")


if __name__ == "__main__":
    main()
