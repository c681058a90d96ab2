"""Learned routing: a trained marl.routing policy decides, message by message, who hears what.

Three parts:

1. Train a tiny routing policy — GPTSwarm's edge logits or a G-Designer
   graph network — with :func:`societas.marl.routing.train_routing` on the
   routing environment (a team of fact keepers, experts and an answerer;
   a task needs facts held by different members, an expert to compute the
   answer and the answerer to report it; every message costs). A few dozen
   updates take well under a second (plus imports).
2. Save it with :func:`~societas.marl.routing.save_policy` and load it back
   with :meth:`~societas.marl.routing.PolicyRouter.from_checkpoint`: one
   file holds the method, the environment, the configuration and the weights.
3. Run a held-out task through a :class:`~societas.topology.Runtime` in
   message mode where each agent but the answerer has a router of kind
   ``router`` naming that policy, with the agents after it and ``END`` as
   targets: each output goes to the members the policy gives an edge
   probability of at least the threshold (``END`` when none). The policy
   decides a superstep's outputs in one forward pass (``route_batch``), and
   the Runtime records in each router event the probabilities the decision
   was made on (``meta["probabilities"]``, from the router's ``explain``).
   The agents holding the task's facts start; their private facts are in
   their system prompts.

    python examples/learned_routing.py
    python examples/learned_routing.py --method gdesigner --train-steps 60 --task-seed 3

Writes the training run, policy.pt and trace.jsonl under runs/learned_routing/.
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
from societas.marl.routing import PolicyRouter, RoutingEnv, Task, parse_answer, save_policy, train_routing
from societas.topology import END, GraphSpec, RouterSpec, RunResult, Runtime


def build_spec(env: RoutingEnv, task_seed: int, max_new_tokens: int) -> tuple[GraphSpec, Task]:
    """The team as a message-driven graph whose every edge is a router of the policy, and the task."""
    task = env.task(env.sample_tasks(1, split="test", generator=task_seed), 0)
    # The env's graph of every candidate edge carries the agents' prompts (with this task's facts).
    team = env.graph(
        env.full_adjacency(), name="team", task=task, drop_isolated=False, max_new_tokens=max_new_tokens
    )
    names = list(env.profile.names)
    routers = [
        RouterSpec(source=n, kind="router", router="policy", targets=[*names[i + 1 :], END], multi=True)
        for i, n in enumerate(names[:-1])
    ]
    starters = [names[h] for h in dict.fromkeys(task.holders)]
    spec = GraphSpec(
        name="learned_routing",
        nodes=team.spec.nodes,
        routers=routers,
        entry=starters,
        final=names[env.sink],
        mode="messages",
        max_steps=2 * env.n_agents,
    )
    return spec, task


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Train, save, load, route; ``llm`` (a scripted model, in tests) replaces ``--llm``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", default="embedded", help="LLM URI for the agents (default: the embedded model)")
    ap.add_argument("--seed", type=int, default=0, help="training and sampling seed")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0 = torch default; 1 is faster when other processes load the cores)",
    )
    ap.add_argument("--method", choices=["gptswarm", "gdesigner"], default="gptswarm")
    ap.add_argument("--train-steps", type=int, default=40, help="REINFORCE updates")
    ap.add_argument("--batch-size", type=int, default=32, help="tasks per update")
    ap.add_argument("--agents", type=int, default=5, help="team size (keepers, experts, answerer)")
    ap.add_argument("--types", type=int, default=2, help="task types")
    ap.add_argument("--threshold", type=float, default=None, help="edge probability to send (default: 0.5)")
    ap.add_argument("--task-seed", type=int, default=0, help="which held-out task to run")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default="runs/learned_routing", help="run directory")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    out = Path(args.out)
    config = {
        "method": args.method,
        "steps": args.train_steps,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "device": "cpu",
        "env": {"n_agents": args.agents, "n_types": args.types, "facts_per_task": 1},
        "eval_every": max(1, args.train_steps // 4),
        "eval_tasks": 200,
        "runtime_tasks": 0,
    }
    trained = train_routing(config, out / "train", progress=False)
    learned = trained.table["learned"]
    print(
        f"trained {args.method} for {args.train_steps} updates: held-out success {learned['success']:.2f}, "
        f"{learned['messages']:.1f} messages per task (fully connected: "
        f"{trained.table['fully_connected']['messages']:.1f})"
    )
    assert trained.env is not None  # train_routing returns the env it trained on
    policy_file = save_policy(trained.router, trained.env, out / "policy.pt")
    router = PolicyRouter.from_checkpoint(policy_file, threshold=args.threshold, multi=True, name="policy")
    print(f"loaded {router!r} from {policy_file}")

    spec, task = build_spec(router.env, args.task_seed, args.max_new_tokens)
    model = llm if llm is not None else load_llm(args.llm)
    rt = Runtime(spec, llm=model, routers={"policy": router}, seed=args.seed)
    result: RunResult = rt.run(task.text)

    print(
        f"task: {task.text}\nfacts: {task.values} held by {[router.env.profile.names[h] for h in task.holders]}"
    )
    decisions = []
    for ev in result.trace:
        if ev.kind != "router":
            continue
        probs = ev.meta.get("probabilities", {})
        chosen = ev.meta["choices"]
        shown = ", ".join(f"{t} {p:.2f}" for t, p in probs.items())
        print(f"[step {ev.step}] {ev.sender} -> {', '.join(chosen)}   (p: {shown})")
        decisions.append({"step": ev.step, "source": ev.sender, "chosen": chosen, "probabilities": probs})
    answer = parse_answer(result.output)
    print(f"answerer: {(result.output or '').strip()!r}; expected ANSWER: {task.answer}")
    trace_path = result.trace.save_jsonl(out / "trace.jsonl")
    summary = {
        "example": "learned_routing",
        "method": args.method,
        "train": {"steps": args.train_steps, "held_out": learned, "wall_s": round(trained.wall_s, 2)},
        "policy": str(policy_file),
        "threshold": router.threshold,
        "task": task.text,
        "decisions": decisions,
        "messages": sum(len(e.receivers) for e in result.trace if e.kind != "router"),
        "answer": answer,
        "correct": answer == task.answer,
        "calls": result.totals["calls"],
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
    }
    print(json.dumps(summary))
    return {**summary, "result": result}


if __name__ == "__main__":
    main()
