"""Novelty rejection and adaptive operator choice: best score after a fixed number of evaluations.

Two tasks, each searched with the LLM-free operators alone (no model: the
figures measure the search, not an LLM's answers):

* ``cfr``: the built-in CFR discovery task with ``make demo``'s settings
  (evolve/tasks/cfr/demo.yaml: building blocks, CMA-ES, crossover, constant
  and operator mutations; successive halving), the validation step off;
* ``circle_packing``: the OpenEvolve-format example in examples/circle_packing
  (26 circles in the unit square, sum of radii over AlphaEvolve's 2.635).

Four configurations per task, the same seeds for each: neither (``novelty:
enabled: false``, ``adaptive: enabled: false``), novelty rejection only,
adaptive choice only, and both. A run goes on until it has spent the
evaluation budget (children the novelty filter rejects cost no evaluation,
so a run with it makes more children for the same budget); the figure is the
best fitness among the seed and the first ``budget`` evaluated children (only
fully evaluated programs count), the mean over seeds with the standard
deviation, and the mean number of children rejected as duplicates.

Run: ``python benchmarks/evolve_novelty_bandit.py`` (defaults: 3 seeds, 48
evaluations on cfr, 200 on circle_packing; ``--quick``: 1 seed, 8 and 16).
Writes ``--out``/table.md and table.json and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from societas.evolve.config import EvolveConfig, load_config
from societas.evolve.controller import Controller
from societas.evolve.database import ProgramStore
from societas.evolve.task import load_task

REPO = Path(__file__).resolve().parents[1]
TASKS = {
    "cfr": ("cfr", REPO / "evolve" / "tasks" / "cfr" / "demo.yaml"),
    "circle_packing": (str(REPO / "examples" / "circle_packing"), None),
}
CONFIGS = {
    "neither": (False, False),
    "novelty": (True, False),
    "adaptive": (False, True),
    "both": (True, True),
}


def configure(task_name: str, seed: int, novelty: bool, adaptive: bool, budget: int) -> tuple:
    task_dir, config_path = TASKS[task_name]
    task = load_task(task_dir)
    config: EvolveConfig = load_config(config_path or task.config_path)
    config.random_seed = seed
    config.novelty.enabled = novelty
    config.adaptive.enabled = adaptive
    config.validation.enabled = False
    config.evaluator.parallel_evaluations = 2
    config.max_iterations = int(math.ceil(budget / 8.0)) * 8  # extended while children are rejected
    config.batch_size = 8
    return task, config


def best_after(programs: list, budget: int) -> dict:
    """The best fitness among the seed and the first ``budget`` evaluated children, and what it took."""
    seed = next(p for p in programs if p.iteration == 0)
    best = seed.fitness
    evaluations = rejected = children = 0
    for program in sorted((p for p in programs if p.iteration > 0), key=lambda p: p.iteration):
        if evaluations >= budget:
            break
        children += 1
        if program.status == "mutation_failed":
            rejected += "novelty" in program.artifacts
            continue
        evaluations += 1
        if program.ok and program.complete and (best is None or program.fitness > best):
            best = program.fitness
    return {
        "best": best,
        "seed": seed.fitness,
        "evaluations": evaluations,
        "children": children,
        "rejected": rejected,
    }


def run_one(task_name: str, config_name: str, seed: int, budget: int, root: Path) -> dict:
    novelty, adaptive = CONFIGS[config_name]
    task, config = configure(task_name, seed, novelty, adaptive, budget)
    run_dir = root / f"{task_name}-{config_name}-s{seed}"
    started = time.monotonic()
    controller = Controller(task, config, run_dir, tensorboard=False)
    while True:
        try:
            controller.run()
        finally:
            controller.close()
        programs = ProgramStore(run_dir / "programs.db").programs()
        result = best_after(programs, budget)
        made = max(p.iteration for p in programs)
        if result["evaluations"] >= budget or made >= 8 * budget:
            break
        # Children rejected as duplicates cost no evaluation: go on until the budget is spent.
        more = 8 * math.ceil(1.5 * (budget - result["evaluations"]) / 8)
        controller = Controller.resume(run_dir, max_iterations=made + more, tensorboard=False)
    result["seconds"] = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cfr-evals", type=int, default=48)
    parser.add_argument("--circle-evals", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1 seed, 8 and 16 evaluations")
    parser.add_argument("--out", default="benchmarks/results/evolve_novelty_bandit")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.cfr_evals, args.circle_evals = 1, 8, 16
    torch.set_num_threads(1)
    # The example's OpenEvolve keys without effect are named once per run otherwise.
    logging.getLogger("societas.evolve.config").setLevel(logging.ERROR)
    budgets = {"cfr": args.cfr_evals, "circle_packing": args.circle_evals}
    rows: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="novelty-bandit-") as tmp:
        for task_name in args.tasks:
            for config_name in CONFIGS:
                runs = []
                for seed in range(args.seeds):
                    result = run_one(task_name, config_name, seed, budgets[task_name], Path(tmp))
                    runs.append(result)
                    print(
                        f"{task_name:>15} {config_name:>8} seed {seed}: best {result['best']:.6g} "
                        f"(seed {result['seed']:.6g}), {result['evaluations']} evaluations, "
                        f"{result['children']} children, {result['rejected']} rejected, "
                        f"{result['seconds']:.0f} s",
                        flush=True,
                    )
                bests = [r["best"] for r in runs]
                rows.setdefault(task_name, {})[config_name] = {
                    "best_mean": statistics.fmean(bests),
                    "best_std": statistics.stdev(bests) if len(bests) > 1 else 0.0,
                    "seed_fitness": runs[0]["seed"],
                    "rejected_mean": statistics.fmean(r["rejected"] for r in runs),
                    "children_mean": statistics.fmean(r["children"] for r in runs),
                    "evaluations": budgets[task_name],
                    "short_runs": sum(r["evaluations"] < budgets[task_name] for r in runs),
                    "runs": runs,
                }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Novelty rejection and adaptive operator choice",
        "",
        f"LLM-free operators, {args.seeds} seeds (0..{args.seeds - 1}), best fitness after a fixed number of "
        f"evaluations (mean ± std over seeds; higher is better). Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, 2 evaluation workers.",
        "",
        "| task | evaluations | seed | neither | novelty only | adaptive only | both | rejected (novelty, both) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task_name, by_config in rows.items():
        cells = [f"{by_config[c]['best_mean']:.6g} ± {by_config[c]['best_std']:.2g}" for c in CONFIGS]
        lines.append(
            f"| {task_name} | {budgets[task_name]} | {by_config['neither']['seed_fitness']:.6g} | "
            + " | ".join(cells)
            + f" | {by_config['novelty']['rejected_mean']:.1f}, {by_config['both']['rejected_mean']:.1f} |"
        )
    (out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "table.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(
        json.dumps(
            {
                f"{task}_{config}_best_mean": rows[task][config]["best_mean"]
                for task in rows
                for config in CONFIGS
            }
        )
    )


if __name__ == "__main__":
    main()
