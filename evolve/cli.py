"""``python -m societas.evolve``: run an evolutionary search or report on a run directory.

``run TASK`` evolves a task directory in OpenEvolve's layout (or a built-in
task by name) and shows a progress bar (best score, evaluations per minute,
failures); ``--resume RUN_DIR`` continues an interrupted run; at the end it
writes the report. ``report RUN_DIR`` writes ``summary.md``,
``plots/fitness.png`` and ``report.html`` (one self-contained page to open in
a browser), scoring the seed, the best program and the task's
baselines on its held-out set first when the task has one (RUN_DIR may also
be the ``--out`` directory of ``run``: its newest run is meant). With
``--json`` the last line of standard output is one JSON object. Exit status 2
means bad input (configuration, task, options) or a sandbox that cannot run
here, 1 a run that failed; either way the reason is one line.

Without a terminal on standard error (a scheduler's job, output piped to a
file) the progress bars are replaced by plain progress lines every
``SOCIETAS_PROGRESS_EVERY_S`` seconds. ``--sandbox`` picks the sandbox backend
of the evaluations (default ``auto``, or the config's ``evaluator.sandbox``);
it is checked with a trivial run before anything starts. ``rlimit`` runs the
candidates unconfined: that is asked for by name, recorded in the run, and
said first on standard error and in the report. A run directory has one
writer: ``--resume`` of a directory another process works on is refused,
naming that process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, cast

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
from societas.agents.progress import ProgressLines, progress_every_s, stderr_is_terminal
from societas.agents.sandbox import SandboxError

from .config import (
    MAX_ITERATIONS,
    MAX_LLM_TIMEOUT_S,
    MAX_RANDOM_SEED,
    MAX_WORKERS,
    SANDBOX_BACKENDS,
    ConfigError,
    SandboxBackend,
    load_config,
    parse_config,
)
from .controller import Controller, RunError, RunLock, load_run, new_run_dir
from .evaluator import TaskError, probe_sandbox
from .executors import Executor, ExecutorError, make_executor
from .mutation import LLMEnsemble
from .report import UNCONFINED_WARNING, write_report
from .task import Task, load_seed_programs, load_task

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


def _held_out_progress() -> tuple[Callable[[Any, int, int], None], Callable[[], None]]:
    """Progress of the held-out evaluation, started on its first result: a rich bar on a terminal, else lines."""
    state: dict[str, Any] = {}

    def update(entry: Any, done: int, total: int) -> None:
        if not stderr_is_terminal():
            if "lines" not in state:
                state["lines"] = ProgressLines("held-out")
            state["lines"].update(done, total, last=entry.label)
            return
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
        if "lines" in state:
            state["lines"].finish()

    return update, close


def _fail(message: str, code: int, as_json: bool) -> NoReturn:
    message = " ".join(message.split())  # one line, whatever the exception's text holds
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    if as_json:
        print(json.dumps({"error": message}))
    raise typer.Exit(code)


RUN_UNCONFINED_WARNING = (
    "candidates run unconfined (no sandbox isolation): the rlimit sandbox backend limits resources "
    "only, so the programs can reach the network and your files"
)


def _note(message: str, as_json: bool) -> None:
    """One line on standard error about how the run goes (standard output keeps the result)."""
    err.print(f"[cyan]note:[/cyan] {message}", highlight=False, soft_wrap=True)


def _warn_unconfined(message: str = UNCONFINED_WARNING) -> None:
    err.print(f"[yellow]warning:[/yellow] {message}", highlight=False, soft_wrap=True)


def _check_range(option: str, value: int | None, low: int, high: int, as_json: bool) -> None:
    if value is not None and not low <= value <= high:
        _fail(f"{option} must be between {low} and {high}, got {value}", 2, as_json)


def _check_run_options(
    iterations: int | None,
    workers: int | None,
    seed: int | None,
    executor: str,
    sandbox: str | None,
    log_level: str,
    as_json: bool,
) -> None:
    """Refuse a bad option value with one line (exit 2) before anything is read or started."""
    _check_range("--iterations", iterations, 0, MAX_ITERATIONS, as_json)
    _check_range("--workers", workers, 1, MAX_WORKERS, as_json)
    _check_range("--seed", seed, -MAX_RANDOM_SEED, MAX_RANDOM_SEED, as_json)
    if executor not in ("process", "ray"):
        _fail(f"--executor must be 'process' or 'ray', got {executor!r}", 2, as_json)
    if sandbox is not None and sandbox not in SANDBOX_BACKENDS:
        _fail(f"--sandbox must be one of {', '.join(SANDBOX_BACKENDS)}, got {sandbox!r}", 2, as_json)
    if log_level.upper() not in logging.getLevelNamesMapping():
        _fail(f"--log-level must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {log_level!r}", 2, as_json)
    _check_progress_env(as_json)


def _check_progress_env(as_json: bool) -> None:
    if not stderr_is_terminal():
        try:
            progress_every_s()
        except ValueError as exc:
            _fail(str(exc), 2, as_json)


class _RunProgress:
    """The run's progress: a rich bar when standard error is a terminal, else a plain line every few seconds."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = 0
        self.bar: Progress | None = None
        self.lines: ProgressLines | None = None
        if stderr_is_terminal():
            self.bar = Progress(
                TextColumn("[bold]evolve"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    "best {task.fields[best]}  {task.fields[rate]} evals/min  {task.fields[failed]} failed"
                ),
                TimeElapsedColumn(),
                console=err,
                transient=False,
            )
            self.task_id = self.bar.add_task("evolve", total=None, best="-", rate="0.0", failed=0)
        else:
            self.lines = ProgressLines("evolve")

    def __call__(self, event: dict[str, Any]) -> None:
        self.done += 1
        minutes = max((time.monotonic() - self.started) / 60.0, 1e-9)
        best = "-" if event["best_score"] is None else f"{event['best_score']:.6g}"
        rate = f"{self.done / minutes:.1f}"
        if self.bar is not None:
            self.bar.update(
                self.task_id,
                total=event["total"],
                completed=event["completed"],
                best=best,
                rate=rate,
                failed=event["failed"],
            )
        elif self.lines is not None:
            self.lines.update(
                event["completed"],
                event["total"],
                **{"best": best, "evals/min": rate, "failed": event["failed"]},
            )

    @contextlib.contextmanager
    def shown(self):
        if self.bar is not None:
            with self.bar:
                yield
        else:
            yield
            if self.lines is not None:
                self.lines.finish()


@app.command()
def run(
    task: str | None = typer.Argument(None, help="task directory or built-in task name (omit with --resume)"),
    config: Path | None = typer.Option(
        None, "--config", help="YAML config (default: the task's config.yaml)"
    ),
    iterations: int | None = typer.Option(
        None, "--iterations", help=f"max_iterations (0 to {MAX_ITERATIONS})"
    ),
    workers: int | None = typer.Option(None, "--workers", help=f"parallel evaluations (1 to {MAX_WORKERS})"),
    executor: str = typer.Option("process", "--executor", help="process or ray"),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="with --executor ray: the cluster to join (HOST:PORT of its head, or 'auto'); default "
        "RAY_ADDRESS, else a local Ray instance",
    ),
    llm: list[str] | None = typer.Option(
        None,
        "--llm",
        help="LLM URI for societas.agents.load_llm (repeatable; replaces llm.models), or 'none' to run the "
        "LLM-free operators only",
    ),
    llm_timeout: float | None = typer.Option(
        None,
        "--llm-timeout",
        help="seconds one request to an OpenAI-compatible server may take in all (overrides llm.timeout)",
    ),
    seed: int | None = typer.Option(None, "--seed", help="random_seed"),
    resume: Path | None = typer.Option(None, "--resume", help="continue this run directory"),
    out: Path = typer.Option(Path("runs/evolve"), "--out", help="where new run directories are made"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON on the last line"),
    held_out: bool = typer.Option(
        True, "--held-out/--no-held-out", help="score the report on the task's held-out set"
    ),
    sandbox: str | None = typer.Option(
        None,
        "--sandbox",
        help="sandbox backend of the evaluations: auto (bubblewrap; the default unless the config's "
        "evaluator.sandbox says otherwise), bwrap, or rlimit (candidates run UNCONFINED: resource limits "
        "only, no isolation from the network or your files)",
    ),
    seed_programs: str | None = typer.Option(
        None,
        "--seed-programs",
        help="also start the islands from the task's seed programs (seeds/*.py): 'all' or comma-separated names",
    ),
    log_level: str = typer.Option("WARNING", "--log-level"),
) -> None:
    """Evolve TASK (or resume a run) and print the best score."""
    _check_run_options(iterations, workers, seed, executor, sandbox, log_level, as_json)
    if ray_address is not None and (executor != "ray" or not ray_address.strip()):
        _fail("--ray-address needs --executor ray and a HOST:PORT (or 'auto')", 2, as_json)
    if llm_timeout is not None and not (math.isfinite(llm_timeout) and 0 < llm_timeout <= MAX_LLM_TIMEOUT_S):
        _fail(
            f"--llm-timeout must be above 0 and at most {MAX_LLM_TIMEOUT_S:g} seconds, got {llm_timeout}",
            2,
            as_json,
        )
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    backend_option = cast(SandboxBackend | None, sandbox)
    lock: RunLock | None = None
    the_task: Task | None = None
    pool: Executor | None = None
    try:
        if resume is not None:
            if task is not None or config is not None or seed_programs is not None:
                _fail(
                    "--resume continues a run with its own task, config and seed programs: "
                    "give no TASK, --config or --seed-programs",
                    2,
                    as_json,
                )
            _, cfg = load_run(resume)
            lock = RunLock(resume)  # refuse at once when another process works on the run
            if seed is not None and seed != cfg.random_seed:
                _fail(
                    f"--seed {seed} differs from the run's seed {cfg.random_seed}; a resumed run keeps its seed",
                    2,
                    as_json,
                )
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
            if seed_programs is not None:
                cfg.seed_programs = [n.strip() for n in seed_programs.split(",") if n.strip()]
                load_seed_programs(the_task, cfg.seed_programs)  # a wrong name fails before anything runs
        if backend_option is not None:
            cfg.evaluator.sandbox = backend_option
        progress = _RunProgress()
        try:
            backend = probe_sandbox(cfg.evaluator)
        except SandboxError as exc:
            # The error says how to fix it; name the option when it does not.
            hint = "" if "rlimit" in str(exc) else " (unconfined evaluations: --sandbox rlimit)"
            _fail(f"the sandbox cannot run the evaluations: {exc}{hint}", 2, as_json)
        unconfined = backend == "rlimit" or cfg.evaluator.sandbox == "rlimit"
        if unconfined:  # before anything of the run is shown
            _warn_unconfined(RUN_UNCONFINED_WARNING)
        if llm_timeout is not None:
            cfg.llm.timeout = llm_timeout
        given = list(llm or [])
        no_llm = [u.strip().lower() for u in given] == ["none"]
        if given and not no_llm and any(u.strip().lower() == "none" for u in given):
            _fail("--llm none runs without any LLM: give it alone, not with other --llm URIs", 2, as_json)
        if no_llm:
            uris: list[str] = []
        elif given:
            uris = given
        else:
            uris = [m.uri(cfg.llm.api_base) for m in cfg.llm.models]
        if (llm_timeout is not None) and not any(uri.strip().startswith("openai:") for uri in uris):
            _fail(
                "--llm-timeout applies to OpenAI-compatible LLMs (openai:...), and this run has none",
                2,
                as_json,
            )
        ensemble = None if no_llm else LLMEnsemble.from_config(cfg.llm, given or None)
        if ensemble is None:
            weights = {k: w for k, w in cfg.mutation.weights.items() if w > 0}
            free = sorted(k for k in weights if k not in ("llm", "llm_line"))
            why = "--llm none" if no_llm else "no LLM is configured (llm.models) or given (--llm)"
            _note(
                f"{why}: children come from the LLM-free operators only ({', '.join(free) or 'none'})",
                as_json,
            )
        n_workers = workers or cfg.evaluator.parallel_evaluations
        _share_cpus_with_evaluations(n_workers)
        pool = make_executor(executor, n_workers, ray_address)
        if resume is not None:
            controller = Controller.resume(
                resume,
                max_iterations=iterations,
                sandbox=backend_option,
                lock=lock,
                llms=ensemble,
                executor=pool,
                on_progress=progress,
            )
        else:
            assert the_task is not None
            controller = Controller(
                the_task,
                cfg,
                new_run_dir(out, the_task.name, cfg.random_seed),
                llms=ensemble,
                executor=pool,
                on_progress=progress,
            )
    except (
        ConfigError,
        TaskError,
        ExecutorError,
        UnknownLLM,
        RunError,
        SandboxError,
        ValueError,
        OSError,
    ) as exc:
        _release(lock, pool)
        _fail(str(exc), 2, as_json)
    except BaseException:
        _release(lock, pool)
        raise
    controller.note_sandbox(backend)
    try:
        with progress.shown():
            result = controller.run()
    except RunError as exc:
        controller.close()
        _fail(str(exc), 1, as_json)
    controller.close()
    update, close = _held_out_progress()
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
    unconfined = unconfined or result.unconfined or figures["unconfined"]
    payload: dict[str, Any] = {
        "best_score": result.best_score,
        "best_training_score": result.best_training_score,
        "validation_score": result.validation_score,
        "selected_by": result.selected_by,
        "seed_score": result.seed_score,
        "evaluated": result.evaluated,
        "failed": result.failed,
        "run_dir": result.run_dir,
        "sandbox": backend,
        "unconfined": unconfined,
    }
    if "held_out" in figures:
        payload["held_out"] = figures["held_out"]
    if as_json:
        print(json.dumps(payload))
    else:
        if unconfined:
            print(f"WARNING: {UNCONFINED_WARNING}")
        print(
            f"best score {result.best_score} (seed {result.seed_score}; chosen on {result.selected_by}"
            + (f", validation score {result.validation_score}" if result.validation_score is not None else "")
            + f"); {result.evaluated} evaluated, "
            f"{result.failed} failed; run directory {result.run_dir}"
        )


def _release(lock: RunLock | None, pool: Executor | None) -> None:
    if pool is not None:
        pool.close()
    if lock is not None:
        lock.release()


@app.command()
def report(
    run_dir: Path = typer.Argument(
        ..., help="a run directory made by `python -m societas.evolve run` (or its --out directory)"
    ),
    held_out: bool = typer.Option(True, "--held-out/--no-held-out", help="score on the task's held-out set"),
    workers: int | None = typer.Option(
        None, "--workers", help=f"parallel held-out evaluations (1 to {MAX_WORKERS})"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Write summary.md (best program's diff, held-out table, fitness plot, per-island statistics) and
    report.html (one self-contained page: lineage tree, fitness over time, each program's code and diff)."""
    _check_range("--workers", workers, 1, MAX_WORKERS, as_json)
    _check_progress_env(as_json)
    update, close = _held_out_progress()
    try:
        figures = write_report(run_dir, held_out=held_out, workers=workers, on_held_out=update)
    except SandboxError as exc:
        close()
        _fail(
            f"the sandbox cannot run the held-out evaluation: {exc}; or report without it: --no-held-out",
            2,
            as_json,
        )
    except (FileNotFoundError, ConfigError, OSError, ValueError) as exc:
        close()
        _fail(str(exc), 2, as_json)
    close()
    if figures["unconfined"]:
        _warn_unconfined()
    if as_json:
        print(json.dumps(figures))
    else:
        print(f"wrote {figures['summary']} and {figures['report_html']} (open it in a browser)")


def main() -> None:
    app(prog_name="python -m societas.evolve")


if __name__ == "__main__":
    main()
