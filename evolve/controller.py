"""The evolution loop: select, mutate, evaluate in the sandbox, commit, repeat.

One run (after AlphaEvolve, Novikov et al. 2025, and OpenEvolve's controller)
works in *batches* of ``batch_size`` iterations made from one snapshot of the
program database:

1. **plan** — iteration ``t`` works on island ``(t - 1) mod num_islands``; a
   generator derived from ``(seed, t)`` picks the parent, the inspirations,
   the mutation kind and the LLM backend;
2. **mutate** — AST operators run locally; LLM prompts are sent, grouped per
   backend, in one batched ``generate`` call each; a malformed answer becomes
   a ``mutation_failed`` program with its reason;
3. **evaluate** — the executor runs the sandboxed cascade for every valid
   child; each result is committed to SQLite the moment it returns;
4. **apply** — the batch's programs enter the MAP-Elites islands in iteration
   order (migrating when due) and ``metrics.jsonl`` gets one line each.

Because every random choice comes from ``(seed, iteration)`` and results are
applied in iteration order, the outcome does not depend on the executor, the
number of workers or the order in which evaluations finish; it depends only on
the seed, the configuration and the LLM answers. Resuming a run directory
replays the stored programs of every complete batch, then redoes the
interrupted batch, skipping (never re-evaluating) its committed iterations.

Run directory: ``config.yaml`` (resolved), ``run.json`` (task, seed),
``programs.db`` (SQLite, WAL), ``metrics.jsonl``, ``best_program.py`` and,
from :mod:`societas.evolve.report`, ``summary.md`` and ``plots/``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .config import EvolveConfig, parse_config
from .database import Population, ProgramStore, derive_rng
from .evaluator import EvalOutcome, TaskEvaluator, run_evaluation
from .executors import Executor, ProcessExecutor
from .mutation import LLMEnsemble, MutationRequest, Mutator
from .program import Program, fitness_of, program_id
from .task import Task, load_task

logger = logging.getLogger(__name__)

__all__ = ["Controller", "RunError", "RunResult", "new_run_dir"]


class RunError(RuntimeError):
    """A run that cannot start or continue (failed seed, mismatched resume)."""


@dataclass
class RunResult:
    best_score: float | None
    seed_score: float | None
    evaluated: int
    failed: int
    mutation_failed: int
    iterations: int
    run_dir: str
    best_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def new_run_dir(out: str | Path, task_name: str, seed: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(out) / f"{task_name}-{stamp}-s{seed}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


class Controller:
    """Runs (or resumes) one evolutionary search in a run directory."""

    def __init__(
        self,
        task: Task,
        config: EvolveConfig,
        run_dir: str | Path,
        *,
        llms: LLMEnsemble | None = None,
        executor: Executor | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.task = task
        self.config = config
        self.run_dir = Path(run_dir)
        self.seed = config.random_seed
        self.mutator = Mutator(config, llms)
        self.evaluator = TaskEvaluator(task.evaluator_path, config.evaluator)
        self.executor = executor or ProcessExecutor(config.evaluator.parallel_evaluations)
        self.on_progress = on_progress
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.store = ProgramStore(self.run_dir / "programs.db")
        self._check_or_record_identity()
        self.population = Population(config.database)
        self.counts = {"ok": 0, "failed": 0, "mutation_failed": 0}
        self.best_so_far: float | None = None
        self.committed = 0

    # ------------------------------------------------------------- run files

    def _check_or_record_identity(self) -> None:
        stored_seed = self.store.get_meta("seed")
        if stored_seed is None:
            self.store.set_meta("seed", self.seed)
            self.store.set_meta("initial_program", self.task.initial_program)
            self.store.set_meta("batch_size", self.config.effective_batch_size)
            (self.run_dir / "config.yaml").write_text(
                yaml.safe_dump(self.config.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
            )
            (self.run_dir / "run.json").write_text(
                json.dumps(
                    {"task": str(self.task.directory), "seed": self.seed, "created": time.time()}, indent=2
                ),
                encoding="utf-8",
            )
            return
        if stored_seed != self.seed:
            raise RunError(f"{self.run_dir} was started with seed {stored_seed}, not {self.seed}")
        if self.store.get_meta("initial_program") != self.task.initial_program:
            raise RunError(f"the task's initial_program.py changed since {self.run_dir} was started")
        if self.store.get_meta("batch_size") != self.config.effective_batch_size:
            raise RunError(
                f"{self.run_dir} was started with batch_size {self.store.get_meta('batch_size')}, "
                f"not {self.config.effective_batch_size}"
            )

    @classmethod
    def resume(cls, run_dir: str | Path, *, max_iterations: int | None = None, **kwargs: Any) -> Controller:
        """Reopen a run directory with its stored task and configuration."""
        run_dir = Path(run_dir)
        try:
            info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
            data = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunError(
                f"{run_dir} is not a run directory (run.json / config.yaml unreadable: {exc})"
            ) from None
        config = parse_config(data, source=str(run_dir / "config.yaml"))
        if max_iterations is not None:
            config.max_iterations = max_iterations
            (run_dir / "config.yaml").write_text(
                yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
            )
        return cls(load_task(info["task"]), config, run_dir, **kwargs)

    # ------------------------------------------------------------------ loop

    def run(self) -> RunResult:
        """Run until ``max_iterations`` iterations are committed; safe to call again after a crash."""
        stored = {p.iteration: p for p in self.store.programs()}
        batch = self.config.effective_batch_size
        max_iter = self.config.max_iterations
        start = self._first_open_batch(stored, batch)
        metrics_path = self.run_dir / "metrics.jsonl"
        metrics_path.write_text("", encoding="utf-8")
        self.committed = sum(1 for i in stored if i > 0)
        for program in stored.values():
            self.counts[program.status] += 1
            fitness = program.fitness if program.ok else None
            if fitness is not None and (self.best_so_far is None or fitness > self.best_so_far):
                self.best_so_far = fitness
        if 0 in stored:
            self._apply([stored[i] for i in sorted(stored) if i < start])
        else:
            seed_program = self._evaluate_seed()
            stored[0] = seed_program
            self._apply([seed_program])
        seed_program = stored[0]
        if not seed_program.ok:
            raise RunError(f"the seed program failed its evaluation: {seed_program.failure}")
        logger.info(
            "run %s: seed fitness %s, starting at iteration %d of %d",
            self.run_dir,
            seed_program.fitness,
            start,
            max_iter,
        )
        while start <= max_iter:
            iterations = list(range(start, min(start + batch, max_iter + 1)))
            done = {i: stored[i] for i in iterations if i in stored}
            new = self._run_batch([i for i in iterations if i not in done])
            self._apply(sorted([*done.values(), *new], key=lambda p: p.iteration))
            start = iterations[-1] + 1
        return self.result()

    @staticmethod
    def _first_open_batch(stored: dict[int, Program], batch: int) -> int:
        start = 1
        while all(i in stored for i in range(start, start + batch)):
            start += batch
        return start

    def _evaluate_seed(self) -> Program:
        code = self.task.initial_program
        outcome = self._safe_evaluate(code)
        program = self._program_from(code, 0, None, 0, 0, {"kind": "seed"}, outcome)
        self.store.add(program)
        return program

    def _plan(self, iteration: int) -> MutationRequest:
        rng = derive_rng(self.seed, "plan", iteration)
        island = (iteration - 1) % self.config.database.num_islands
        pc = self.config.prompt
        selection = self.population.sample(island, rng, pc.num_top_programs, pc.num_diverse_programs)
        kind, model = self.mutator.plan(rng)
        donor = rng.choice(selection.inspirations) if kind == "crossover" and selection.inspirations else None
        request = MutationRequest(
            iteration=iteration,
            kind=kind,
            parent=selection.parent,
            inspirations=selection.inspirations,
            seed=rng.getrandbits(63),
            model_index=model,
            donor=donor,
            island=selection.island,
            strategy=selection.strategy,
        )
        return request

    def _run_batch(self, iterations: list[int]) -> list[Program]:
        if not iterations:
            return []
        requests = [self._plan(i) for i in iterations]
        results = self.mutator.make(requests)
        programs: list[Program] = []
        jobs, pending = [], []
        for request, result in zip(requests, results):
            info = {**result.info, "selection": request.strategy}
            if result.code is None:
                program = Program(
                    id=program_id(self.seed, request.iteration, request.parent.code + "\0failed"),
                    code=request.parent.code,
                    iteration=request.iteration,
                    parent_id=request.parent.id,
                    generation=request.parent.generation + 1,
                    island=request.island,
                    mutation=info,
                    status="mutation_failed",
                    artifacts={
                        "failure": result.failure or "mutation failed",
                        **({"llm_response": result.llm_response} if result.llm_response else {}),
                    },
                )
                self.store.add(program)
                self._count(program)
                programs.append(program)
                continue
            jobs.append(self.evaluator.job(result.code))
            pending.append((request, result, info))
        for index, outcome in self.executor.map_unordered(run_evaluation, jobs):
            request, result, info = pending[index]
            if isinstance(outcome, BaseException):
                outcome = EvalOutcome(
                    "failed", artifacts={"failure": f"executor error: {type(outcome).__name__}: {outcome}"}
                )
            program = self._program_from(
                result.code,
                request.iteration,
                request.parent,
                request.island,
                request.parent.generation + 1,
                info,
                outcome,
            )
            if result.llm_response:
                program.artifacts["llm_response"] = result.llm_response
            self.store.add(program)
            self._count(program)
            programs.append(program)
        return programs

    def _safe_evaluate(self, code: str) -> EvalOutcome:
        try:
            return run_evaluation(self.evaluator.job(code))
        except Exception as exc:
            return EvalOutcome(
                "failed", artifacts={"failure": f"evaluation error: {type(exc).__name__}: {exc}"}
            )

    def _program_from(
        self, code, iteration, parent, island, generation, mutation, outcome: EvalOutcome
    ) -> Program:
        ok = outcome.status == "ok"
        return Program(
            id=program_id(self.seed, iteration, code),
            code=code,
            iteration=iteration,
            parent_id=parent.id if parent is not None else None,
            generation=generation,
            island=island,
            mutation=mutation,
            metrics=outcome.metrics,
            fitness=fitness_of(outcome.metrics) if ok else None,
            status="ok" if ok else "failed",
            artifacts=outcome.artifacts,
            evaluated_at=time.time(),
            eval_seconds=outcome.seconds,
        )

    def _count(self, program: Program) -> None:
        self.counts[program.status] += 1
        self.committed += 1
        fitness = program.fitness if program.ok else None
        if fitness is not None and (self.best_so_far is None or fitness > self.best_so_far):
            self.best_so_far = fitness
        if self.on_progress is not None:
            self.on_progress(
                {
                    "iteration": program.iteration,
                    "completed": self.committed,
                    "status": program.status,
                    "best_score": self.best_so_far,
                    "evaluated": self.counts["ok"] + self.counts["failed"],
                    "failed": self.counts["failed"] + self.counts["mutation_failed"],
                    "total": self.config.max_iterations,
                }
            )

    def _apply(self, programs: list[Program]) -> None:
        """Enter programs into the islands in iteration order and log them to metrics.jsonl."""
        with (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") as log:
            for program in programs:
                self.population.add(program)
                best = self.population.best()
                log.write(
                    json.dumps(
                        {
                            "iteration": program.iteration,
                            "id": program.id,
                            "parent_id": program.parent_id,
                            "island": program.island,
                            "mutation": program.mutation.get("kind"),
                            "status": program.status,
                            "fitness": program.fitness,
                            "best_fitness": best.fitness if best else None,
                            "failure": program.failure,
                            "eval_seconds": round(program.eval_seconds, 4),
                        }
                    )
                    + "\n"
                )
        best = self.population.best()
        if best is not None:
            (self.run_dir / "best_program.py").write_text(best.code, encoding="utf-8")

    def result(self) -> RunResult:
        programs = self.store.programs()
        best = self.population.best()
        seed = next((p for p in programs if p.iteration == 0), None)
        return RunResult(
            best_score=best.fitness if best else None,
            seed_score=seed.fitness if seed else None,
            evaluated=sum(p.status in ("ok", "failed") for p in programs),
            failed=sum(p.status != "ok" for p in programs),
            mutation_failed=sum(p.status == "mutation_failed" for p in programs),
            iterations=max((p.iteration for p in programs), default=0),
            run_dir=str(self.run_dir),
            best_id=best.id if best else None,
        )

    def close(self) -> None:
        self.executor.close()
        self.store.close()
