"""Scoring a run's programs on the task's held-out set, after the search.

The discovery protocol of arXiv 2602.16928 selects on training games only and
then reports the chosen programs on held-out games against known algorithms.
A task opts in by defining, in its ``evaluator.py``:

* ``evaluate_held_out(program_path) -> dict`` — metrics on the held-out set
  (never used for selection);
* optionally ``held_out_baselines() -> {name: program source}`` — reference
  algorithms written as programs of the task's own form, scored the same way.

:func:`evaluate_held_out` runs the seed, the best ``held_out.top_programs``
programs of the run and the chosen baselines, each in the sandbox (the same
limits and ``task_settings`` as the search, one process per program, in
parallel), and caches the results in ``held_out.json`` in the run directory,
keyed by the program's code and the settings, so a second report does not
redo them. Baselines are trusted task code; only their *names* come from the
evaluator module, which is imported here (task evaluators are trusted, the
candidates they score are not).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from societas.agents.documents import DocumentError, load_json_file

from .config import EvolveConfig
from .database import Population
from .evaluator import EvalOutcome, TaskError, TaskEvaluator, WarmPool, map_grouped
from .executors import ProcessExecutor
from .program import Program, fitness_of, parse_python

logger = logging.getLogger(__name__)

__all__ = [
    "HELD_OUT_FILE",
    "HeldOutEntry",
    "evaluate_held_out",
    "held_out_baselines",
    "score_stage",
    "supports_held_out",
]

HELD_OUT_FILE = "held_out.json"
STAGE = "evaluate_held_out"


@dataclass
class HeldOutEntry:
    """One program's result on a stage; ``kind`` is ``seed``, ``evolved``, ``history`` (an earlier
    validation-best program) or ``baseline``."""

    label: str
    kind: str
    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    program_id: str | None = None
    training_fitness: float | None = None
    seconds: float = 0.0

    @property
    def score(self) -> float | None:
        return fitness_of(self.metrics) if self.status == "ok" else None


def _top_level_functions(path: Path) -> set[str]:
    tree = parse_python(path.read_text(encoding="utf-8"), filename=str(path))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    return defined | imported


def supports_held_out(evaluator_path: str | Path) -> bool:
    """True when the task's evaluator defines ``evaluate_held_out``."""
    return STAGE in _top_level_functions(Path(evaluator_path))


def held_out_baselines(evaluator_path: str | Path) -> dict[str, str]:
    """The evaluator's ``held_out_baselines()`` (``{}`` when it has none)."""
    path = Path(evaluator_path).resolve()
    if "held_out_baselines" not in _top_level_functions(path):
        return {}
    name = f"_evolve_task_evaluator_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
        baselines = module.held_out_baselines()
    finally:
        sys.path.remove(str(path.parent))
    if not isinstance(baselines, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in baselines.items()
    ):
        raise TaskError(f"{path}: held_out_baselines() must return a dict of name -> program source")
    return baselines


def _candidates(
    programs: list[Program],
    population: Population,
    config: EvolveConfig,
    baselines: dict[str, str],
    selection: list[tuple[Program, str]] | None = None,
) -> list[tuple[str, str, str, Program | None]]:
    """``(label, kind, code, program)`` to score, seed first, then evolved programs, then baselines.

    ``selection``: the programs the validation set chose over the run, the
    run's returned program last, each with a label (empty: the seed stayed
    the choice); with ``None`` the evolved programs are the best
    ``held_out.top_programs`` on the training set that beat the seed there.
    """
    seed = next((p for p in programs if p.iteration == 0 and p.ok), None)
    out: list[tuple[str, str, str, Program | None]] = []
    if seed is not None:
        out.append(("seed", "seed", seed.code, seed))
    seen = {seed.code} if seed is not None else set()
    if selection:
        chosen, _ = selection[-1]
        if chosen.code not in seen:
            seen.add(chosen.code)
            out.append((f"best evolved ({chosen.id})", "evolved", chosen.code, chosen))
        for program, label in selection[:-1]:
            if program.code not in seen:
                seen.add(program.code)
                out.append((f"{label} ({program.id})", "history", program.code, program))
    elif selection is None:
        ranked = sorted(
            (p for p in population.programs.values() if p.ok and p.complete and p.iteration > 0),
            key=population.rank_key,
            reverse=True,
        )
        # Successful (ok) programs always have a fitness; the checks only narrow the Optional.
        seed_fitness = seed.fitness if seed is not None else None
        chosen_list: list[Program] = []
        for program in ranked:
            if len(chosen_list) >= config.held_out.top_programs:
                break
            no_better = (
                seed_fitness is not None and program.fitness is not None and program.fitness <= seed_fitness
            )
            if program.code in seen or no_better:
                continue  # only evolved programs that beat the seed on the training set
            seen.add(program.code)
            chosen_list.append(program)
        for rank, program in enumerate(chosen_list, start=1):
            label = "best evolved" if rank == 1 else f"evolved #{rank}"
            out.append((f"{label} ({program.id})", "evolved", program.code, program))
    wanted = config.held_out.baselines
    if wanted is not None:
        unknown = sorted(set(wanted) - set(baselines))
        if unknown:
            raise TaskError(
                f"held_out.baselines names {unknown}, which the task does not offer; "
                f"it offers: {sorted(baselines) or 'none'}"
            )
    for name, code in baselines.items():
        if wanted is None or name in wanted:
            out.append((name, "baseline", code, None))
    return out


def _key(code: str, settings: str) -> str:
    return hashlib.sha256(f"{settings}\0{code}".encode()).hexdigest()


def evaluate_held_out(
    run_dir: str | Path,
    evaluator_path: str | Path,
    config: EvolveConfig,
    programs: list[Program],
    population: Population,
    *,
    workers: int | None = None,
    on_result: Callable[[HeldOutEntry, int, int], None] | None = None,
    selection: list[tuple[Program, str]] | None = None,
) -> list[HeldOutEntry]:
    """Score the seed, the best programs and the baselines on the held-out set (cached in ``held_out.json``)."""
    candidates = _candidates(programs, population, config, held_out_baselines(evaluator_path), selection)
    return score_stage(
        run_dir,
        evaluator_path,
        config,
        candidates,
        stage=STAGE,
        cache_name=HELD_OUT_FILE,
        timeout=config.held_out.timeout,
        workers=workers,
        on_result=on_result,
    )


def score_stage(
    run_dir: str | Path,
    evaluator_path: str | Path,
    config: EvolveConfig,
    candidates: list[tuple[str, str, str, Program | None]],
    *,
    stage: str,
    cache_name: str,
    timeout: float | None = None,
    workers: int | None = None,
    on_result: Callable[[HeldOutEntry, int, int], None] | None = None,
) -> list[HeldOutEntry]:
    """Run the evaluator's ``stage`` on each ``(label, kind, code, program)`` in the sandbox.

    Results are cached in ``RUN_DIR/cache_name``, keyed by the code and the
    task settings, and written after every result (failures are retried).
    """
    run_dir = Path(run_dir)
    evaluator = TaskEvaluator(evaluator_path, config.evaluator)
    template = evaluator.job("")
    template = replace(
        template,
        stages=(stage,),
        thresholds=(),
        timeout_s=timeout or config.evaluator.timeout,
    )
    settings = template.task_settings
    cache_path = run_dir / cache_name
    try:
        cache = load_json_file(cache_path) if cache_path.is_file() else {}
        if not isinstance(cache, dict):
            raise DocumentError(str(cache_path), "expected a JSON object")
    except DocumentError:
        logger.warning("ignoring unreadable %s", cache_path)
        cache = {}
    cached: dict[str, dict[str, Any]] = cache.get("results", {})

    entries: dict[int, HeldOutEntry] = {}
    todo: list[tuple[int, str]] = []
    for index, (label, kind, code, program) in enumerate(candidates):
        hit = cached.get(_key(code, settings))
        if hit is not None and hit.get("status") == "ok":  # failures are retried
            entries[index] = HeldOutEntry(
                label,
                kind,
                hit["status"],
                hit.get("metrics", {}),
                hit.get("failure"),
                program.id if program else None,
                program.fitness if program else None,
                hit.get("seconds", 0.0),
            )
        else:
            todo.append((index, code))
    total = len(candidates)
    if todo:
        logger.info("%s of %d program(s) (%d cached)", stage, len(todo), total - len(todo))
        count = max(1, min(workers or config.evaluator.parallel_evaluations, len(todo)))
        size = config.evaluator.group_size
        # With group_size > 1, sandboxes that stay up: each worker takes the next program as it is free.
        pool: ProcessExecutor | WarmPool = WarmPool(count, size) if size > 1 else ProcessExecutor(count)
        try:
            jobs = [replace(template, code=code) for _, code in todo]
            for position, outcome in map_grouped(pool, jobs, size, pool.workers):
                index, code = todo[position]
                if isinstance(outcome, BaseException):
                    outcome = EvalOutcome("failed", artifacts={"failure": f"executor error: {outcome}"})
                label, kind, _, program = candidates[index]
                entry = HeldOutEntry(
                    label,
                    kind,
                    outcome.status,
                    outcome.metrics,
                    outcome.failure,
                    program.id if program else None,
                    program.fitness if program else None,
                    round(outcome.seconds, 3),
                )
                entries[index] = entry
                record = {
                    "label": label,
                    "status": entry.status,
                    "metrics": entry.metrics,
                    "failure": entry.failure,
                    "seconds": entry.seconds,
                    "evaluated_at": time.time(),
                }
                if entry.status != "ok":
                    record["stderr"] = outcome.artifacts.get(f"{stage}_stderr", "")[-3000:]
                cached[_key(code, settings)] = record
                # Written after every result so an interrupted report keeps what it has.
                cache_path.write_text(
                    json.dumps({"task_settings": settings, "results": cached}, indent=1), encoding="utf-8"
                )
                if on_result is not None:
                    on_result(entry, len(entries), total)
        finally:
            pool.close()
    return [entries[i] for i in range(total)]
