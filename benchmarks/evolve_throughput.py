"""Evolution throughput: candidates evaluated per minute with 1 and 2 workers.

Every candidate runs the way a search runs it: ``societas.evolve.evaluator.run_evaluation``
in its own sandboxed process (bubblewrap where available), through the cascade of
the task's stages. The candidates are a fixed list of children of the task's seed
(constant perturbations made with fixed seeds, the seed itself first), so every
configuration scores exactly the same programs; the table checks that all
configurations return the same metrics.

1. Executor throughput: all candidates handed to one executor at once
   (``map_unordered``) — the local process pool (the default executor) and Ray
   (``--executor ray``) when it is installed, each with 1 and 2 workers. The
   baseline is the same executor with 1 worker; the target on a 2-core machine
   is at least 1.7x with 2 workers.
   Then the same candidates with ``--group-size`` of them per sandbox
   (``evaluator.group_size``: the interpreter, torch and the game trees load
   once per group, each candidate still runs in a process of its own) on the
   process pool with 2 workers, and on the warm pool (``WarmPool``: 2
   sandboxes that stay up for up to ``--warm-capacity`` candidates each, every
   worker taking the next candidate as soon as it is free), against the same
   pool with a sandbox per candidate.
2. Search throughput: a whole ``Controller`` run (mutation, sandboxed cascade,
   SQLite commits, MAP-Elites updates) of as many iterations, LLM-free, with 1
   and 2 workers (``batch_size = 2 x workers``), and with 2 workers on the warm
   pool (``group_size = --warm-capacity``, ``batch_size = 8``, as ``make demo``);
   the batch barrier makes this a little lower than the executor figure.

The task is the built-in ``cfr`` task at a small number of CFR iterations
(``--cfr-iterations``, default 100; the paper's 1000 makes each candidate ~4 s
instead of ~2 s, with the same scaling), or ``--task curve_fit`` (the
OpenEvolve-format test task, whose candidates cost little more than starting
the sandbox).

Run: ``python benchmarks/evolve_throughput.py`` (``--quick`` for a smoke run:
4 candidates, executor throughput only). Prints a table and ends with one
JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from societas.evolve.config import EvolveConfig, load_config, parse_config
from societas.evolve.controller import Controller
from societas.evolve.evaluator import (
    EvalJob,
    EvalOutcome,
    TaskEvaluator,
    WarmPool,
    map_grouped,
    run_evaluation,
)
from societas.evolve.executors import Executor, ExecutorError, make_executor
from societas.evolve.mutation import MutationError, perturb_constants
from societas.evolve.task import Task, load_task

REPO = Path(__file__).resolve().parents[1]
TASKS = {"cfr": "cfr", "curve_fit": str(REPO / "tests" / "evolve" / "tasks" / "curve_fit")}


def task_and_config(name: str, cfr_iterations: int) -> tuple[Task, EvolveConfig]:
    task = load_task(TASKS[name])
    config = load_config(task.config_path) if task.config_path else parse_config({})
    if name == "cfr":
        config.evaluator.task_settings = {
            "iterations": cfr_iterations,
            "stage1_iterations": max(1, cfr_iterations // 10),
        }
        config.evaluator.cascade_thresholds = [-1.0]  # every sane candidate reaches the full stage
    config.evaluator.timeout = 300
    return task, config


def candidates(task: Task, config: EvolveConfig, count: int) -> list[str]:
    """The seed and ``count - 1`` distinct constant perturbations of it (fixed seeds)."""
    codes, seen, seed = [task.initial_program], {task.initial_program}, 0
    while len(codes) < count:
        seed += 1
        try:
            child, _ = perturb_constants(task.initial_program, random.Random(seed), config)
        except MutationError as exc:
            raise SystemExit(f"cannot make benchmark candidates from {task.name}: {exc}") from None
        if child not in seen:
            seen.add(child)
            codes.append(child)
    return codes


def executor_run(kind: str, workers: int, jobs: list[EvalJob], group: int = 1) -> dict:
    executor: Executor | WarmPool = (
        WarmPool(workers, group) if kind == "warm" else make_executor(kind, workers)
    )
    try:
        run_evaluation(jobs[0])  # warm the page cache and the executor
        started = time.perf_counter()
        results = dict(map_grouped(executor, jobs, group, workers))
        seconds = time.perf_counter() - started
    finally:
        executor.close()
    outcomes: dict[int, EvalOutcome] = {}
    for index, outcome in results.items():
        if isinstance(outcome, BaseException):
            raise SystemExit(f"{kind} executor, job {index}: {outcome!r}")
        outcomes[index] = outcome
    ok = sum(o.status == "ok" for o in outcomes.values())
    return {
        "executor": kind,
        "workers": workers,
        "group": group,
        "candidates": len(jobs),
        "ok": ok,
        "seconds": seconds,
        "per_minute": 60.0 * len(jobs) / seconds,
        "metrics": [outcomes[i].metrics for i in range(len(jobs))],
    }


def controller_run(
    task: Task, config: EvolveConfig, workers: int, iterations: int, group: int = 1, batch: int | None = None
) -> dict:
    cfg = config.model_copy(deep=True)
    cfg.max_iterations = iterations
    cfg.batch_size = batch or 2 * workers * group
    cfg.evaluator.group_size = group
    cfg.evaluator.parallel_evaluations = workers
    cfg.mutation.weights = {"constant": 0.8, "crossover": 0.2}
    # Candidates per minute: the validation of the best programs (extra evaluations that are
    # not candidates) is left out, as are held-out scoring and reports.
    cfg.validation.enabled = False
    out = Path(tempfile.mkdtemp(prefix="evolve-throughput-"))
    try:
        controller = Controller(task, cfg, out / "run", executor=make_executor("process", workers))
        started = time.perf_counter()
        try:
            result = controller.run()
        finally:
            controller.close()
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(out, ignore_errors=True)
    # The seed (iteration 0) is evaluated alone before the first batch; it is part of the run.
    evaluated = result.evaluated
    return {
        "workers": workers,
        "group": group,
        "batch": cfg.batch_size,
        "iterations": iterations,
        "evaluated": evaluated,
        "seconds": seconds,
        "per_minute": 60.0 * evaluated / seconds,
        "best": result.best_score,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 candidates, executors only")
    ap.add_argument("--task", choices=sorted(TASKS), default="cfr")
    ap.add_argument("--candidates", type=int, default=None, help="candidates per configuration (default 16)")
    ap.add_argument("--cfr-iterations", type=int, default=None, help="CFR iterations per game (default 100)")
    ap.add_argument("--group-size", type=int, default=4, help="candidates per sandbox in the grouped rows")
    ap.add_argument(
        "--warm-capacity", type=int, default=64, help="candidates per sandbox of the warm pool (it stays up)"
    )
    args = ap.parse_args()
    q = args.quick
    count = args.candidates or (4 if q else 16)
    cfr_iterations = args.cfr_iterations or (20 if q else 100)
    task, config = task_and_config(args.task, cfr_iterations)
    evaluator = TaskEvaluator(task.evaluator_path, config.evaluator)
    jobs = [evaluator.job(code) for code in candidates(task, config, count)]

    print(
        f"# evolve throughput — {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    )
    print(
        f"task {task.name}"
        + (f" (K={cfr_iterations} CFR iterations per training game)" if args.task == "cfr" else "")
        + f", {count} candidates, stages {' -> '.join(evaluator.stages)}, sandboxed\n"
    )

    rows: list[dict] = []
    notes: dict[str, str] = {}
    for kind in ("process", "ray"):
        for workers in (1, 2):
            try:
                rows.append(executor_run(kind, workers, jobs))
            except ExecutorError:
                notes[kind] = "ray not installed"
                break
    group = max(1, args.group_size)
    if group > 1:
        rows.append(executor_run("process", 2, jobs, group))
    warm = max(1, args.warm_capacity)
    rows.append(executor_run("warm", 2, jobs, warm))
    reference = rows[0]["metrics"]
    print(
        "| executor | workers | per sandbox | candidates | ok | seconds | candidates/min | vs 1 worker "
        "| same metrics |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    speedups: dict[str, float] = {}
    for row in rows:
        base = next(
            r
            for r in rows
            if r["executor"] == ("process" if row["executor"] == "warm" else row["executor"])
            and r["workers"] == 1
        )
        ratio = row["per_minute"] / base["per_minute"]
        if row["workers"] == 2 and row["group"] == 1:
            speedups[row["executor"]] = ratio
        print(
            f"| {row['executor']} | {row['workers']} | {row['group']} | {row['candidates']} | {row['ok']} | "
            f"{row['seconds']:.1f} | {row['per_minute']:.1f} | {ratio:.2f}x | "
            f"{'yes' if row['metrics'] == reference else 'NO'} |"
        )
    for kind, note in notes.items():
        print(f"| {kind} | - | - | - | - | - | - | {note} |")

    search: list[dict] = []
    if not q:
        for workers in (1, 2):
            search.append(controller_run(task, config, workers, count))
        # With group_size > 1 the search evaluates on the warm pool (sandboxes that stay up).
        search.append(controller_run(task, config, 2, count, warm, batch=8))
        print(
            "\n| search (Controller, LLM-free) | workers | per sandbox | evaluated | seconds | candidates/min "
            "| vs 1 worker |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for row in search:
            print(
                f"| batch {row['batch']}{' (warm pool)' if row['group'] > 1 and row is search[-1] else ''} "
                f"| {row['workers']} | {row['group']} | "
                f"{row['evaluated']} | {row['seconds']:.1f} | {row['per_minute']:.1f} | "
                f"{row['per_minute'] / search[0]['per_minute']:.2f}x |"
            )
    target = 1.7
    got = speedups.get("process")
    if got is not None:
        print(
            f"\nprocess pool, 2 workers vs 1: {got:.2f}x (target >= {target}x)"
            + ("" if got >= target else " — below target; is another job using the CPUs?")
        )

    head: dict = {
        "benchmark": "evolve_throughput",
        "task": task.name,
        "quick": q,
        "candidates": count,
        "cpus": os.cpu_count(),
    }
    if args.task == "cfr":
        head["cfr_iterations"] = cfr_iterations
    for row in rows:
        suffix = f"_group{row['group']}" if row["group"] > 1 else ""
        head[f"{row['executor']}_{row['workers']}w{suffix}_per_min"] = round(row["per_minute"], 2)
    grouped = [r for r in rows if r["group"] > 1 and r["executor"] == "process"]
    if grouped and speedups.get("process"):
        plain = next(r for r in rows if r["executor"] == "process" and r["workers"] == 2 and r["group"] == 1)
        head["group_size"] = group
        head["group_speedup_2w"] = round(grouped[0]["per_minute"] / plain["per_minute"], 3)
    for kind, ratio in speedups.items():
        head[f"{kind}_speedup_2w"] = round(ratio, 3)
    for kind, note in notes.items():
        head[kind] = note
    for row in search:
        suffix = f"_group{row['group']}" if row["group"] > 1 else ""
        if row is search[-1] and row["group"] > 1:
            suffix = "_warm"
        head[f"search_{row['workers']}w{suffix}_per_min"] = round(row["per_minute"], 2)
    if len(search) >= 2:
        head["search_speedup_2w"] = round(search[1]["per_minute"] / search[0]["per_minute"], 3)
    if len(search) >= 3:
        head["search_warm_speedup_2w"] = round(search[-1]["per_minute"] / search[1]["per_minute"], 3)
    warm_row = next(r for r in rows if r["executor"] == "warm")
    plain_2w = next(r for r in rows if r["executor"] == "process" and r["workers"] == 2 and r["group"] == 1)
    head["warm_capacity"] = warm
    head["warm_speedup_2w"] = round(warm_row["per_minute"] / plain_2w["per_minute"], 3)
    head["same_metrics"] = all(r["metrics"] == reference for r in rows)
    head["meets_target"] = bool(got is not None and got >= target)
    print(json.dumps(head))


if __name__ == "__main__":
    main()
