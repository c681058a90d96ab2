"""Learned routing on the routing environment: GPTSwarm and G-Designer against fixed topologies.

For each seed, trains GPTSwarm (edge logits + REINFORCE) and G-Designer (GNN
over agents + task node) with :func:`societas.marl.routing.train_routing` on the
default team (8 agents: 4 fact keepers, 3 experts, the answerer; 4 task
types; 2 facts per task; cost 0.02 per message), then evaluates on held-out
tasks (odd uids, never trained on; the same tasks for every topology of a
seed):

- the fully connected DAG, the empty graph, random DAGs with the learned
  graph's edge count (per task), and the two learned, pruned topologies;
- success rate, messages per task and reward (success - cost x messages)
  from the vectorised torch path on ``--eval-tasks`` tasks;
- the same topologies run through :class:`societas.topology.Runtime` with
  skill-profile :class:`societas.agents.FunctionLLM` agents on ``--runtime-tasks``
  tasks: success, messages (from the traces) and LLM calls per task, and
  whether both paths agree on every task;
- optionally (``--llm URI``, e.g. ``embedded`` or ``openai:URL#MODEL``), the
  fully connected and learned graphs of the first seed played by a real LLM on
  ``--llm-tasks`` tasks.

Writes ``table.md``, ``table.json``, the learning curves and learned graphs
of the first seed to ``--out`` (default ``benchmarks/results/routing``); run
directories go to ``--runs`` (default ``runs/routing-bench``). Prints the table
and ends with one JSON line of the headline figures.

Run: ``python benchmarks/routing_results.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from societas.marl.routing import RoutingTrainConfig, run_runtime, train_routing
from societas.topology import graph_to_mermaid

ROWS = (
    ("fully_connected", "fully connected DAG"),
    ("empty", "empty graph"),
    ("random_gptswarm", "random DAG, GPTSwarm's edge count"),
    ("gptswarm", "GPTSwarm (learned, one graph)"),
    ("random_gdesigner", "random DAG, G-Designer's edge count per task"),
    ("gdesigner", "G-Designer (learned, per task)"),
)


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _cell(xs: list[float], digits: int = 3) -> str:
    m, s = _mean_std(xs)
    return f"{m:.{digits}f} ± {s:.{digits}f}" if len(xs) > 1 else f"{m:.{digits}f}"


def run_seed(seed: int, args: argparse.Namespace) -> dict:
    runs = {}
    for method, steps in (("gptswarm", args.steps_gptswarm), ("gdesigner", args.steps_gdesigner)):
        cfg = RoutingTrainConfig(method=method, steps=steps, seed=seed, device=args.device,
                                 eval_tasks=args.eval_tasks, runtime_tasks=0)  # fmt: skip
        runs[method] = train_routing(cfg, Path(args.runs) / f"{method}-seed{seed}", progress=not args.quiet)
    env = runs["gdesigner"].env
    tasks = env.sample_tasks(args.eval_tasks, split="test", generator=1_000_000 + seed)
    g = torch.Generator().manual_seed(seed)
    learned = {}
    for method, res in runs.items():
        adj = res.router.adjacency(tasks)
        adj = adj.expand(len(tasks), *adj.shape[-2:]) if adj.dim() == 2 else adj
        learned[method] = env.prune_dead_ends(adj)
    adjs = {
        "fully_connected": env.full_adjacency(),
        "empty": env.empty_adjacency(),
        "random_gptswarm": env.random_adjacency(learned["gptswarm"].sum((-2, -1)), g),
        "gptswarm": learned["gptswarm"],
        "random_gdesigner": env.random_adjacency(learned["gdesigner"].sum((-2, -1)), g),
        "gdesigner": learned["gdesigner"],
    }
    sub = tasks.select(slice(0, args.runtime_tasks))
    out: dict = {"seed": seed, "rows": {}, "train_s": {m: r.wall_s for m, r in runs.items()}}
    agree = True
    for key, adj in adjs.items():
        fast = env.evaluate(adj, tasks).summary()
        a_sub = adj if adj.dim() == 2 else adj[: len(sub)]
        rt = run_runtime(env, a_sub, sub, seed=seed)
        fast_sub = env.evaluate(a_sub, sub)
        agree &= (
            rt.success == fast_sub.success.tolist()
            and [float(m) for m in rt.messages] == fast_sub.messages.tolist()
        )
        out["rows"][key] = {**fast, **{f"runtime_{k}": v for k, v in rt.summary().items()}}
    out["runtime_agrees"] = agree
    out["runs"] = runs
    out["adjs"] = adjs
    out["tasks"] = tasks
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps-gptswarm", type=int, default=600)
    ap.add_argument("--steps-gdesigner", type=int, default=1500)
    ap.add_argument("--eval-tasks", type=int, default=2000)
    ap.add_argument("--runtime-tasks", type=int, default=200)
    ap.add_argument("--llm", default=None, help="also evaluate seed 0's graphs with this LLM URI")
    ap.add_argument("--llm-tasks", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default="benchmarks/results/routing")
    ap.add_argument("--runs", default="runs/routing-bench")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed, few steps and tasks")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.steps_gptswarm, args.steps_gdesigner = args.seeds[:1], 100, 200
        args.eval_tasks, args.runtime_tasks = 300, 30
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    per_seed = [run_seed(s, args) for s in args.seeds]
    agg: dict = {}
    for key, _ in ROWS:
        agg[key] = {
            m: _mean_std([r["rows"][key][m] for r in per_seed])
            for m in ("success", "messages", "reward", "runtime_success", "runtime_messages", "runtime_calls")
        }
    agrees = all(r["runtime_agrees"] for r in per_seed)

    first = per_seed[0]
    env = first["runs"]["gdesigner"].env
    llm_rows: dict = {}
    if args.llm:
        sub = first["tasks"].select(slice(0, args.llm_tasks))
        for key in ("fully_connected", "gptswarm", "gdesigner"):
            adj = first["adjs"][key]
            adj = adj if adj.dim() == 2 else adj[: len(sub)]
            t1 = time.perf_counter()
            rt = run_runtime(env, adj, sub, llm=args.llm, seed=first["seed"])
            llm_rows[key] = {**rt.summary(), "wall_s": time.perf_counter() - t1}

    # ---- table.md
    p = env.profile
    lines = [
        "# Learned routing on the routing environment",
        "",
        f"Team: {env.n_agents} agents ({p.roles.count('keeper')} fact keepers, {p.roles.count('expert')} experts, "
        f"the answerer); {env.n_types} task types ({', '.join(p.type_names)}); {env.config.facts_per_task} facts per "
        f"task; cost {env.config.cost_per_message} per message; reward = success - cost x messages. "
        f"Seeds {', '.join(map(str, args.seeds))} (mean ± std over seeds). Training: GPTSwarm {args.steps_gptswarm} and "
        f"G-Designer {args.steps_gdesigner} REINFORCE updates of 128 tasks. Held-out tasks (never trained on): "
        f"{args.eval_tasks} per seed for the torch path, the first {args.runtime_tasks} of them through "
        "`societas.topology.Runtime` with skill-profile FunctionLLM agents.",
        "",
        "| topology | success | messages / task | reward | Runtime success | Runtime messages / task | LLM calls / task |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label in ROWS:
        cols = [r["rows"][key] for r in per_seed]
        vals = [_cell([c[m] for c in cols], 2 if "messages" in m or "calls" in m else 3)
                for m in ("success", "messages", "reward", "runtime_success", "runtime_messages", "runtime_calls")]  # fmt: skip
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    full, gs, gd = agg["fully_connected"], agg["gptswarm"], agg["gdesigner"]
    lines += [
        "",
        f"The Runtime path and the torch path agree on every task's success and message count: "
        f"{'yes' if agrees else 'NO'}.",
        "",
        f"GPTSwarm reaches success {gs['success'][0]:.3f} (fully connected: {full['success'][0]:.3f}) with "
        f"{gs['messages'][0]:.2f} messages per task instead of {full['messages'][0]:.0f} "
        f"({100 * (1 - gs['messages'][0] / full['messages'][0]):.0f}% fewer); G-Designer, which designs a graph per "
        f"task, reaches {gd['success'][0]:.3f} with {gd['messages'][0]:.2f} "
        f"({100 * (1 - gd['messages'][0] / full['messages'][0]):.0f}% fewer). The fewest messages a task can need is "
        f"{env.config.facts_per_task + 1} (its fact keepers to a skilled expert, the expert to the answerer).",
        "",
        "Training time per run (s): "
        + ", ".join(
            f"{m} {statistics.fmean(r['train_s'][m] for r in per_seed):.1f}"
            for m in ("gptswarm", "gdesigner")
        ),
        "",
    ]
    if llm_rows:
        lines += [
            f"With a real LLM (`{args.llm}`) playing every agent, seed {first['seed']}'s graphs, {args.llm_tasks} tasks:",
            "",
            "| topology | success | messages / task | LLM calls / task | wall (s) |",
            "|---|---|---|---|---|",
        ]
        for key, row in llm_rows.items():
            label = dict(ROWS)[key]
            lines.append(
                f"| {label} | {row['success']:.3f} | {row['messages']:.2f} | {row['calls']:.2f} | {row['wall_s']:.1f} |"
            )
        lines.append("")
    lines += [
        f"Learned topologies of seed {first['seed']} (`graphs_seed{first['seed']}.md` has them as Mermaid):",
        "",
    ]
    for method, res in first["runs"].items():
        for key, gr in res.graphs.items():
            label = "every task" if key == "graph" else f"type {key}"
            lines.append(
                f"- {method}, {label}: " + (", ".join(f"{a} -> {b}" for a, b in gr.edges) or "(no edges)")
            )
    table_md = "\n".join(lines) + "\n"
    (out_dir / "table.md").write_text(table_md, encoding="utf-8")

    mermaid = [f"# Learned topologies, seed {first['seed']}", ""]
    for method, res in first["runs"].items():
        for key, gr in res.graphs.items():
            mermaid += [f"## {method}: {'every task' if key == 'graph' else 'type ' + key}", "", "```mermaid",
                        graph_to_mermaid(gr, direction="LR").rstrip(), "```", ""]  # fmt: skip
        shutil.copyfile(res.out_dir / "learning_curve.png", out_dir / f"learning_curve_{method}.png")
    (out_dir / f"graphs_seed{first['seed']}.md").write_text("\n".join(mermaid), encoding="utf-8")

    headline = {
        "benchmark": "routing",
        "seeds": args.seeds,
        "fully_connected_success": round(full["success"][0], 4),
        "fully_connected_messages": round(full["messages"][0], 3),
        "gptswarm_success": round(gs["success"][0], 4),
        "gptswarm_messages": round(gs["messages"][0], 3),
        "gdesigner_success": round(gd["success"][0], 4),
        "gdesigner_messages": round(gd["messages"][0], 3),
        "gdesigner_message_reduction": round(1 - gd["messages"][0] / full["messages"][0], 4),
        "runtime_agrees": agrees,
    }
    table_json = {
        "config": dict(vars(args).items()),
        "env": env.config.model_dump(),
        "rows": {key: {m: {"mean": v[0], "std": v[1]} for m, v in agg[key].items()} for key, _ in ROWS},
        "per_seed": [
            {
                "seed": r["seed"],
                "rows": r["rows"],
                "train_s": r["train_s"],
                "runtime_agrees": r["runtime_agrees"],
            }
            for r in per_seed
        ],
        "real_llm": {"llm": args.llm, "tasks": args.llm_tasks, "rows": llm_rows} if llm_rows else None,
        "headline": headline,
        "wall_s": time.perf_counter() - t0,
    }
    (out_dir / "table.json").write_text(json.dumps(table_json, indent=2), encoding="utf-8")
    print(table_md)
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
