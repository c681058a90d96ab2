"""``python -m societas.evolve``: run an evolutionary search or report on a run directory.

``run TASK`` evolves a task directory in OpenEvolve's layout (or a built-in
task by name) and shows a progress bar (best score, evaluations per minute,
failures); ``--resume RUN_DIR`` continues an interrupted run; at the end it
writes the report. ``report RUN_DIR`` writes ``summary.md`` and
``plots/fitness.png``, scoring the seed, the best program and the task's
baselines on its held-out set first when the task has one (RUN_DIR may also
be the ``--out`` directory of ``run``: its newest run is meant). With
``--json`` the last line of standard output is one JSON object. Exit status 2
means bad input (configuration, task, options), 1 a run that failed.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import NoReturn

import torch
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from societas.agents.llm import UnknownLLM

from .config import ConfigError, load_config, parse_config
from .controller import Controller, RunError, new_run_dir
from .evaluator import TaskError
from .executors import ExecutorError, make_executor
from .mutation import LLMEnsemble
from .report import write_report
from .task import load_task

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Evolutionary discovery of algorithm code."
)
err = Console(stderr=True)


def _share_cpus_with_evaluations(workers: int) -> None:
    """Give a local model in this process the cores the sandboxed evaluations leave free (at least one).

    torch's default of one thread per core oversubscribes the machine while
    ``workers`` evaluations run, and then generation slows down many times over.
    """
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - workers))


def _held_out_progress(as_json: bool):
    """A rich progress bar for the held-out evaluation, started on its first result."""
    state: dict = {}

    def update(entry, done: int, total: int) -> None:
        if "progress" not in state:
            progress = Progress(
                TextColumn("[bold]held-out"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[last]}"),
                TimeElapsedColumn(),
                console=err,
            )
            progress.start()
            state["progress"], state["bar"] = progress, progress.add_task("held-out", total=total, last="")
        state["progress"].update(state["bar"], completed=done, last=entry.label)
        if done >= total:
            state["progress"].stop()

    def close() -> None:
        if "progress" in state:
            state["progress"].stop()

    return update, close


def _fail(message: str, code: int, as_json: bool) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    if as_json:
        print(json.dumps({"error": message}))
    raise typer.Exit(code)


@app.command()
def run(
    task: str | None = typer.Argument(None, help="task directory or built-in task name (omit with --resume)"),
    config: Path | None = typer.Option(
        None, "--config", help="YAML config (default: the task's config.yaml)"
    ),
    iterations: int | None = typer.Option(None, "--iterations", min=0, help="max_iterations"),
    workers: int | None = typer.Option(None, "--workers", min=1, help="parallel evaluations"),
    executor: str = typer.Option("process", "--executor", help="process or ray"),
    llm: list[str] | None = typer.Option(
        None, "--llm", help="LLM URI for societas.agents.load_llm (repeatable)"
    ),
    seed: int | None = typer.Option(None, "--seed", help="random_seed"),
    resume: Path | None = typer.Option(None, "--resume", help="continue this run directory"),
    out: Path = typer.Option(Path("runs/evolve"), "--out", help="where new run directories are made"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON on the last line"),
    held_out: bool = typer.Option(
        True, "--held-out/--no-held-out", help="score the report on the task's held-out set"
    ),
    log_level: str = typer.Option("WARNING", "--log-level"),
) -> None:
    """Evolve TASK (or resume a run) and print the best score."""
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if executor not in ("process", "ray"):
        _fail(f"--executor must be 'process' or 'ray', got {executor!r}", 2, as_json)
    try:
        if resume is not None:
            stored = parse_config(
                __import__("yaml").safe_load((resume / "config.yaml").read_text()), source=str(resume)
            )
            if seed is not None and seed != stored.random_seed:
                _fail(
                    f"--seed {seed} differs from the run's seed {stored.random_seed}; a resumed run keeps its seed",
                    2,
                    as_json,
                )
            cfg = stored
        else:
            if task is None:
                _fail("give a TASK directory, or --resume RUN_DIR", 2, as_json)
            the_task = load_task(task)
            config_path = config or the_task.config_path
            cfg = load_config(config_path) if config_path else parse_config({})
            if iterations is not None:
                cfg.max_iterations = iterations
            if seed is not None:
                cfg.random_seed = seed
        if llm:
            uris = [(uri, 1.0) for uri in llm]
        else:
            uris = [(m.uri(cfg.llm.api_base), m.weight) for m in cfg.llm.models]
        ensemble = LLMEnsemble.from_uris(uris) if uris else None
        n_workers = workers or cfg.evaluator.parallel_evaluations
        _share_cpus_with_evaluations(n_workers)
        pool = make_executor(executor, n_workers)
    except (ConfigError, TaskError, ExecutorError, UnknownLLM, ValueError, OSError) as exc:
        _fail(str(exc), 2, as_json)

    stats = {"started": time.monotonic(), "done": 0}
    progress = Progress(
        TextColumn("[bold]evolve"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("best {task.fields[best]}  {task.fields[rate]} evals/min  {task.fields[failed]} failed"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    bar = progress.add_task("evolve", total=None, best="-", rate="0.0", failed=0)

    def on_progress(event: dict) -> None:
        stats["done"] += 1
        minutes = max((time.monotonic() - stats["started"]) / 60.0, 1e-9)
        best = event["best_score"]
        progress.update(
            bar,
            total=event["total"],
            completed=event["completed"],
            best="-" if best is None else f"{best:.6g}",
            rate=f"{stats['done'] / minutes:.1f}",
            failed=event["failed"],
        )

    try:
        if resume is not None:
            controller = Controller.resume(
                resume, max_iterations=iterations, llms=ensemble, executor=pool, on_progress=on_progress
            )
        else:
            controller = Controller(
                the_task,
                cfg,
                new_run_dir(out, the_task.name, cfg.random_seed),
                llms=ensemble,
                executor=pool,
                on_progress=on_progress,
            )
    except (ConfigError, TaskError, RunError, ValueError) as exc:
        pool.close()
        _fail(str(exc), 2, as_json)
    try:
        with progress:
            result = controller.run()
    except RunError as exc:
        controller.close()
        _fail(str(exc), 1, as_json)
    controller.close()
    update, close = _held_out_progress(as_json)
    try:
        figures = write_report(result.run_dir, held_out=held_out, workers=n_workers, on_held_out=update)
    except Exception as exc:  # the run itself is committed; say why the report is missing
        close()
        _fail(
            f"the run finished ({result.run_dir}) but its report failed: {type(exc).__name__}: {exc}",
            1,
            as_json,
        )
    close()
    payload = {
        "best_score": result.best_score,
        "seed_score": result.seed_score,
        "evaluated": result.evaluated,
        "failed": result.failed,
        "run_dir": result.run_dir,
    }
    if "held_out" in figures:
        payload["held_out"] = figures["held_out"]
    if as_json:
        print(json.dumps(payload))
    else:
        print(
            f"best score {result.best_score} (seed {result.seed_score}); {result.evaluated} evaluated, "
            f"{result.failed} failed; run directory {result.run_dir}"
        )


@app.command()
def report(
    run_dir: Path = typer.Argument(
        ..., help="a run directory made by `python -m societas.evolve run` (or its --out directory)"
    ),
    held_out: bool = typer.Option(True, "--held-out/--no-held-out", help="score on the task's held-out set"),
    workers: int | None = typer.Option(None, "--workers", min=1, help="parallel held-out evaluations"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Write summary.md (best program's diff, held-out table, fitness plot, per-island statistics)."""
    update, close = _held_out_progress(as_json)
    try:
        figures = write_report(run_dir, held_out=held_out, workers=workers, on_held_out=update)
    except (FileNotFoundError, ConfigError, OSError, ValueError) as exc:
        close()
        _fail(str(exc), 2, as_json)
    close()
    if as_json:
        print(json.dumps(figures))
    else:
        print(f"wrote {figures['summary']}")


def main() -> None:
    app(prog_name="python -m societas.evolve")


if __name__ == "__main__":
    main()
