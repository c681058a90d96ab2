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
``programs.db`` (SQLite, WAL), ``metrics.jsonl``, ``best_program.py`` (the
program the run returns: the best on the task's validation games when it
has them, see :mod:`societas.evolve.selection`, else the best on training),
``run.lock``, ``tensorboard/`` (TensorBoard event files, unless the
controller is made with ``tensorboard=False``; see below) and, from
:mod:`societas.evolve.report`, ``summary.md`` and ``plots/``.

TensorBoard points are at the iteration: each child's ``search/fitness``
(evaluated ones), ``search/best_fitness`` (as in ``metrics.jsonl``) and
``search/eval_seconds``; after the seeds (step 0) and after each batch (its
last iteration) ``islands/<i>/best_fitness``, ``islands/<i>/mean_fitness`` and
``islands/<i>/size``, ``search/evaluations_per_min`` (that batch's
evaluations over its wall time), the running counts ``search/evaluated``,
``search/failed``, ``search/mutation_failed`` and ``search/failure_rate``, and
per mutation kind ``operators/<kind>/improved_rate`` (children that beat their
parent's fitness, the operator's success rate), ``operators/<kind>/valid_rate``
and ``operators/<kind>/children``. A resumed run replays its stored programs
without writing them again and purges the points from the interrupted batch on.

A run directory has one writer: while a :class:`Controller` works on it, it
holds an advisory ``flock`` on ``run.lock`` (which holds its PID), and a
second controller on the same directory (another ``--resume``) is refused
with a :class:`RunLockedError` naming that PID. The lock goes with the
process, however it ends. The store's metadata records the sandbox backends
the evaluations ran on (``sandbox_backends``); ``rlimit`` there means that
candidates ran unconfined, which the report and the command line say first.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from societas.agents.documents import DocumentError, load_json_file
from societas.marl.board import Board, open_board

from .bandit import OperatorBandit, improvement
from .blocks import BlockLibrary
from .config import EvolveConfig, SandboxBackend, dump_config, load_config
from .database import Population, ProgramStore, derive_rng
from .evaluator import (
    EvalJob,
    EvalOutcome,
    TaskEvaluator,
    WarmPool,
    evaluation_seed,
    map_grouped,
    run_evaluation,
)
from .executors import Executor, ProcessExecutor
from .mutation import (
    AST_FALLBACK_KINDS,
    LLM_KINDS,
    LLMEnsemble,
    LLMUnavailable,
    MutationRequest,
    MutationResult,
    Mutator,
)
from .novelty import NoveltyFilter, NoveltyVerdict, code_hash
from .program import Program, fitness_of, program_id
from .selection import Validator
from .task import Task, load_seed_programs, load_task

logger = logging.getLogger(__name__)

__all__ = [
    "LOCK_FILE",
    "Controller",
    "RunError",
    "RunLock",
    "RunLockedError",
    "RunResult",
    "load_run",
    "new_run_dir",
]

LOCK_FILE = "run.lock"
ADAPTIVE_META = "adaptive_weights"  # the store's record of the bandit's weights over time


# LLM-made children failing in a row on a backend error (connection, server error) before the run
# stops: a backend that is down wastes every LLM child of every later batch.
LLM_ERROR_LIMIT = 12


class RunError(RuntimeError):
    """A run that cannot start or continue (failed seed, mismatched resume, not a run directory)."""


class RunLockedError(RunError):
    """Another process holds the run directory's lock."""

    def __init__(self, run_dir: Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"{run_dir} is in use by {holder} (it holds {run_dir / LOCK_FILE}); "
            "a run directory has one writer at a time: wait for that run to end or stop it"
        )
        self.pid = pid


class RunLock:
    """An exclusive advisory lock (``flock``) on ``RUN_DIR/run.lock``, which holds the owner's PID.

    Taken without waiting: :class:`RunLockedError` names the holder's PID when
    another process has it. The kernel drops the lock when the process ends,
    even by SIGKILL, so a stale ``run.lock`` file never blocks a later run.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        handle: IO[str] = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            handle.close()
            raise RunLockedError(self.run_dir, int(text) if text.isdigit() else None) from None
        except BaseException:
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle: IO[str] | None = handle

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        """Give the lock up (the file stays; an unlocked ``run.lock`` means nothing)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], EvolveConfig]:
    """The ``run.json`` and the configuration of an existing run directory, checked for resuming.

    Raises :class:`RunError` naming the directory or the missing file when
    ``run_dir`` does not exist, is not a run directory or has lost its program
    database (a run without its programs cannot be continued), and
    :class:`societas.evolve.config.ConfigError` naming ``config.yaml`` when
    that file is unreadable or invalid.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(
            f"cannot resume {run_dir}: no such run directory"
            if not run_dir.exists()
            else f"cannot resume {run_dir}: it is not a directory"
        )
    try:
        info = load_json_file(run_dir / "run.json")
    except DocumentError as exc:
        raise RunError(f"cannot resume {run_dir}: it is not a run directory ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("task"), str):
        raise RunError(f"cannot resume {run_dir}: {run_dir / 'run.json'} does not name the run's task")
    config = load_config(run_dir / "config.yaml")
    if not (run_dir / "programs.db").is_file():
        raise RunError(
            f"cannot resume {run_dir}: its program database {run_dir / 'programs.db'} is missing; "
            "start a new run instead"
        )
    return info, config


@dataclass
class RunResult:
    best_score: float | None  # training fitness of the returned program (best_id)
    best_training_score: float | None  # the best training fitness of any program
    validation_score: float | None  # the returned program's validation score, when the task validates
    selected_by: str  # "validation" or "training": what chose the returned program
    seed_score: float | None
    evaluated: int
    failed: int
    mutation_failed: int
    iterations: int
    run_dir: str
    best_id: str | None
    sandbox_backends: list[str]  # the sandbox backends the evaluations ran on ("rlimit": unconfined)

    @property
    def unconfined(self) -> bool:
        """Whether candidates ran without sandbox isolation (the ``rlimit`` backend)."""
        return "rlimit" in self.sandbox_backends

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def new_run_dir(out: str | Path, task_name: str, seed: int) -> Path:
    """Create and return a fresh run directory ``OUT/TASK-STAMP-sSEED[-N]`` (never one that exists)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(out) / f"{task_name}-{stamp}-s{seed}"
    base.parent.mkdir(parents=True, exist_ok=True)
    path, n = base, 1
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


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
        lock: RunLock | None = None,
        tensorboard: bool = True,
    ) -> None:
        """Open (or create) ``run_dir`` and take its lock (``lock``: one already taken on it).

        ``tensorboard=False``: no TensorBoard event files (``run_dir/tensorboard/``).
        """
        self.task = task
        self.config = config
        self.run_dir = Path(run_dir)
        self.seed = config.random_seed
        blocks = BlockLibrary.load(task.blocks_path) if task.blocks_path is not None else None
        self.mutator = Mutator(config, llms, blocks)
        self.llms = llms
        # LLM-made children that failed in a row on a backend error (not a malformed answer).
        self._llm_error_streak = 0
        self._llm_last_error = ""
        self.evaluator = TaskEvaluator(task.evaluator_path, config.evaluator)
        self.on_progress = on_progress
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.lock = lock if lock is not None else RunLock(self.run_dir)
        try:
            self.store = ProgramStore(self.run_dir / "programs.db")
            try:
                self._check_or_record_identity()
            except BaseException:
                self.store.close()
                raise
        except BaseException:
            self.lock.release()
            raise
        self.executor = executor or ProcessExecutor(config.evaluator.parallel_evaluations)
        # Local evaluations with group_size > 1 run on sandboxes that stay up for the whole run.
        ev = config.evaluator
        self.pool = (
            WarmPool(ev.parallel_evaluations, ev.group_size)
            if ev.group_size > 1 and self.executor.name == "process"
            else None
        )
        self.validator = Validator(self.evaluator, config, self.store, self.pool or self.executor)
        # LLM children are generated here while the other children of a batch are evaluated.
        self._side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evolve-llm")
        self.sandbox_backends: set[str] = set(self.store.get_meta("sandbox_backends", None) or [])
        self.extra_seeds = load_seed_programs(task, config.seed_programs)
        self.population = Population(config.database)
        self.counts = {"ok": 0, "failed": 0, "mutation_failed": 0}
        self.best_so_far: float | None = None
        self.committed = 0
        # CMA-ES: the programs its searches started from, and each one's children in iteration order.
        self._cmaes_origins: dict[str, Program] = {}
        # Successive halving: the scores recorded so far at the stage before the cascade's last.
        stages = self.evaluator.stages
        self._rung_stage = stages[-2] if len(stages) >= 2 else None
        self._rung_scores: list[float] = []
        self._cmaes_children: dict[str, list[Program]] = {}
        # Novelty rejection: the programs made so far (applied in iteration order, so a resume rebuilds it).
        nc = config.novelty
        self.novelty = NoveltyFilter(threshold=nc.similarity_threshold) if nc.enabled else None
        # code hash -> iteration of each child sent to evaluation that the filter has not learnt yet
        self._queued: dict[str, int] = {}
        # Adaptive choice of operator and model: UCB1 over the arms, updated in iteration order.
        self.bandit: OperatorBandit | None = None
        if config.adaptive.enabled:
            ac, arms = config.adaptive, self.mutator.arms()
            self.bandit = OperatorBandit(
                list(arms),
                arms,
                exploration=ac.exploration,
                window=ac.window,
                min_weight=min(ac.min_weight, 1.0 / len(arms)),
                temperature=ac.temperature,
            )
        self._arm_weights: dict[str, float] | None = None  # the weights this batch is planned from
        self.tensorboard = tensorboard
        self.board = Board()  # open while run() works
        # Per mutation kind: children, valid (a program came out), evaluated (ok), improved on the parent.
        self._operators: dict[str, dict[str, int]] = {}

    # ------------------------------------------------------------- run files

    def _check_or_record_identity(self) -> None:
        stored_seed = self.store.get_meta("seed")
        if stored_seed is None:
            self.store.set_meta("seed", self.seed)
            self.store.set_meta("initial_program", self.task.initial_program)
            self.store.set_meta("batch_size", self.config.effective_batch_size)
            (self.run_dir / "config.yaml").write_text(dump_config(self.config), encoding="utf-8")
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
    def resume(
        cls,
        run_dir: str | Path,
        *,
        max_iterations: int | None = None,
        sandbox: SandboxBackend | None = None,
        lock: RunLock | None = None,
        **kwargs: Any,
    ) -> Controller:
        """Reopen a run directory with its stored task and configuration (see :func:`load_run`).

        ``max_iterations`` and ``sandbox`` (the evaluations' sandbox backend)
        replace the stored values and are written to its ``config.yaml``.
        Raises :class:`RunLockedError` when another process works on the run
        (``lock``: the run's lock, already taken by the caller; released on failure).
        """
        run_dir = Path(run_dir)
        try:
            info, config = load_run(run_dir)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        lock = lock if lock is not None else RunLock(run_dir)
        try:
            changed = False
            if max_iterations is not None and max_iterations != config.max_iterations:
                config.max_iterations, changed = max_iterations, True
            if sandbox is not None and sandbox != config.evaluator.sandbox:
                config.evaluator.sandbox, changed = sandbox, True
            if changed:
                (run_dir / "config.yaml").write_text(dump_config(config), encoding="utf-8")
            return cls(load_task(info["task"]), config, run_dir, lock=lock, **kwargs)
        except BaseException:
            lock.release()
            raise

    def note_sandbox(self, backend: str | None) -> None:
        """Record in the store that evaluations ran on the sandbox backend ``backend``."""
        if backend is None or backend in self.sandbox_backends:
            return
        self.sandbox_backends.add(backend)
        self.store.set_meta("sandbox_backends", sorted(self.sandbox_backends))
        logger.info("run %s: evaluations run on the %s sandbox backend", self.run_dir, backend)

    # ------------------------------------------------------------------ loop

    def run(self) -> RunResult:
        if self.llms is not None:  # a server that cannot answer stops the run before it starts
            try:
                self.llms.check()
            except LLMUnavailable as exc:
                raise RunError(f"{exc}; nothing was run") from exc
        """Run until ``max_iterations`` iterations are committed; safe to call again after a crash."""
        try:
            return self._run()
        finally:
            self.board.close()

    def _run(self) -> RunResult:
        stored = {p.iteration: p for p in self.store.programs()}
        batch = self.config.effective_batch_size
        max_iter = self.config.max_iterations
        start = self._first_open_batch(stored, batch)
        # The event files of an earlier session hold every point before ``start``: those of the
        # interrupted batch on are purged, and the replay below writes nothing again.
        self.board.close()
        self.board = open_board(self.run_dir, enabled=self.tensorboard, purge_step=start)
        replay_to_board = not self.board.continued
        self._operators = {}
        metrics_path = self.run_dir / "metrics.jsonl"
        metrics_path.write_text("", encoding="utf-8")
        self.committed = sum(1 for i in stored if i > 0)
        for program in stored.values():
            self.counts[program.status] += 1
            fitness = program.fitness if program.ok else None
            if fitness is not None and (self.best_so_far is None or fitness > self.best_so_far):
                self.best_so_far = fitness
        if 0 not in stored:
            stored[0] = self._evaluate_seed()
        seed_program = stored[0]
        if not seed_program.ok:
            raise RunError(f"the seed program failed its evaluation: {seed_program.failure}")
        for index, (name, code) in enumerate(self.extra_seeds, start=1):
            if -index not in stored:
                stored[-index] = self._evaluate_seed(code, -index, name)
        for i in (i for i in stored if i <= 0):  # the seeds count: "best" is never below the seed
            fitness = stored[i].fitness
            if stored[i].ok and fitness is not None:
                if self.best_so_far is None or fitness > self.best_so_far:
                    self.best_so_far = fitness
        # The seed first (it sets the feature ranges), then the extra seeds, then the search's programs.
        order = sorted((i for i in stored if i < start), key=lambda i: (i != 0, i > 0, abs(i)))
        self._apply([stored[i] for i in order], to_board=replay_to_board)
        if self.bandit is not None:
            # The weights over time: those recorded before this session, then the replayed state.
            saved = self.store.get_meta(ADAPTIVE_META, None) or []
            self.bandit.history = [(int(i), dict(w)) for i, w in saved if int(i) < start - 1]
            self.bandit.snapshot(start - 1)
            self.store.set_meta(ADAPTIVE_META, self.bandit.history)
        if replay_to_board:
            self._board_batch(start - 1)
        due = self.validator.due(self.population)
        logger.info(
            "run %s: seed fitness %s, starting at iteration %d of %d",
            self.run_dir,
            seed_program.fitness,
            start,
            max_iter,
        )
        budget = self.config.time_budget_minutes
        began = time.monotonic()
        while start <= max_iter:
            if budget is not None and time.monotonic() - began > 60.0 * budget:
                logger.info(
                    "time budget of %g minutes spent: stopping after iteration %d of %d",
                    budget,
                    start - 1,
                    max_iter,
                )
                self.store.set_meta(
                    "stopped_by_time_budget", {"after_iteration": start - 1, "minutes": budget}
                )
                break
            iterations = list(range(start, min(start + batch, max_iter + 1)))
            done = {i: stored[i] for i in iterations if i in stored}
            began_batch = time.monotonic()
            # Programs due for validation are scored alongside this batch's children (validation never
            # feeds the search, so this changes no program, only when the records arrive).
            # The batch is planned from one snapshot of the adaptive weights (None: the configured ones).
            self._arm_weights = self.bandit.weights() if self.bandit is not None else None
            new = self._run_batch([i for i in iterations if i not in done], due, iterations[0] - 1)
            self._apply(sorted([*done.values(), *new], key=lambda p: p.iteration))
            if self.bandit is not None:
                self.bandit.snapshot(iterations[-1])
                self.store.set_meta(ADAPTIVE_META, self.bandit.history)
            evaluations = sum(p.status != "mutation_failed" for p in new)
            self._board_batch(iterations[-1], evaluations, time.monotonic() - began_batch)
            due = self.validator.due(self.population)
            self._write_best()
            start = iterations[-1] + 1
            if self._llm_error_streak >= LLM_ERROR_LIMIT:
                raise RunError(
                    f"the LLM failed {self._llm_error_streak} children in a row, the last with "
                    f"{self._llm_last_error!r}; every program up to iteration {start - 1} is committed: "
                    "fix the backend and continue with --resume"
                )
        self._validate(min(start - 1, max_iter))
        return self.result()

    def _validate(self, at_iteration: int) -> None:
        """Validate new training top programs, then write ``best_program.py`` (the chosen one)."""
        for record in self.validator.update(self.population, at_iteration):
            logger.info(
                "validation: program %s (iteration %d) scores %s",
                record.program_id,
                record.iteration,
                record.score,
            )
        self._write_best()

    def _write_best(self) -> None:
        chosen = self.chosen()
        if chosen is not None:
            (self.run_dir / "best_program.py").write_text(chosen.code, encoding="utf-8")

    def chosen(self) -> Program | None:
        """The program the run returns: the best on validation when the task validates, else on training."""
        chosen_id = self.validator.chosen_id()
        if chosen_id is not None and chosen_id in self.population.programs:
            return self.population.programs[chosen_id]
        return self.population.best()

    @staticmethod
    def _first_open_batch(stored: dict[int, Program], batch: int) -> int:
        start = 1
        while all(i in stored for i in range(start, start + batch)):
            start += batch
        return start

    def _evaluate_seed(self, code: str | None = None, iteration: int = 0, name: str | None = None) -> Program:
        """Evaluate the task's seed (iteration 0) or extra seed ``name`` (iteration -1, -2, ...)."""
        code = self.task.initial_program if code is None else code
        # The same cascade as every child: a seed stopped early ranks with the children stopped there.
        outcome = self._safe_evaluate(code, iteration)
        self.note_sandbox(outcome.sandbox)
        island = (-iteration - 1) % self.config.database.num_islands if iteration < 0 else 0
        mutation: dict[str, Any] = (
            {"kind": "seed"} if name is None else {"kind": "seed", "seed_program": name}
        )
        program = self._program_from(code, iteration, None, island, 0, mutation, outcome)
        self.store.add(program)
        if iteration < 0 and not program.ok:
            logger.warning("seed program %s failed its evaluation: %s", name, program.failure)
        return program

    def _plan(self, iteration: int) -> MutationRequest:
        rng = derive_rng(self.seed, "plan", iteration)
        island = (iteration - 1) % self.config.database.num_islands
        pc = self.config.prompt
        selection = self.population.sample(island, rng, pc.num_top_programs, pc.num_diverse_programs)
        kind, model = self.mutator.plan(rng, self._arm_weights)
        if kind not in LLM_KINDS and "error" in selection.parent.artifacts:
            # The evaluator said what is wrong with this program (OpenEvolve's evaluators score it 0 with an
            # 'error' entry): a model reads that and can repair it, a random edit of it stays broken.
            selection = self.population.sample(
                island, rng, pc.num_top_programs, pc.num_diverse_programs, without_error=True
            )
        donor = rng.choice(selection.inspirations) if kind == "crossover" and selection.inspirations else None
        parent, history = selection.parent, []
        if kind == "cmaes":
            # CMA-ES works on the island's elite; an elite made by CMA-ES continues its origin's search.
            elite_id = self.population.best_id(self.population.islands[selection.island])
            elite = self.population.programs[elite_id] if elite_id is not None else parent
            origin_id = (elite.mutation.get("cmaes") or {}).get("origin", elite.id)
            parent = self._cmaes_origins.get(origin_id, elite)
            history = list(self._cmaes_children.get(parent.id, []))
        request = MutationRequest(
            iteration=iteration,
            kind=kind,
            parent=parent,
            inspirations=selection.inspirations,
            seed=rng.getrandbits(63),
            model_index=model,
            donor=donor,
            island=selection.island,
            strategy=selection.strategy,
            cmaes_history=history,
        )
        return request

    def _run_batch(
        self, iterations: list[int], validate: list[Program] | None = None, at_iteration: int = 0
    ) -> list[Program]:
        """Make and evaluate the children of ``iterations`` (and validate ``validate`` on the side).

        LLM children are generated in a side thread while the other children
        are evaluated, then evaluated themselves: the same children and results
        as one after the other, with the cores busy during generation. On a
        warm pool they join its queue the moment they are made.
        """
        validate = [p for p in (validate or []) if p.id not in self.validator.records]
        if not iterations:
            if validate:
                self._evaluate_children([], [], validate, at_iteration)
            return []
        requests = [self._plan(i) for i in iterations]
        slow = [i for i, r in enumerate(requests) if r.kind in LLM_KINDS]
        fast = [i for i, r in enumerate(requests) if r.kind not in LLM_KINDS]
        made: dict[int, MutationResult] = {}
        future = self._side.submit(self.mutator.make, [requests[i] for i in slow]) if slow else None
        if self.pool is not None:
            return self._stream_batch(requests, fast, slow, future, validate, at_iteration)
        try:
            made.update(zip(fast, self.mutator.make([requests[i] for i in fast])))
            programs = self._evaluate_children(
                [requests[i] for i in fast], [made[i] for i in fast], validate, at_iteration
            )
        finally:
            llm_results = future.result() if future is not None else []
        made.update(zip(slow, llm_results))
        programs += self._evaluate_children(
            [requests[i] for i in slow], [made[i] for i in slow], [], at_iteration
        )
        return programs

    def _stream_batch(
        self,
        requests: list[MutationRequest],
        fast: list[int],
        slow: list[int],
        llm: Future | None,
        validate: list[Program],
        at_iteration: int,
    ) -> list[Program]:
        """A batch on the warm pool: every job is queued as soon as it exists, results are committed as they come."""
        assert self.pool is not None
        pool = self.pool
        programs: list[Program] = []
        waiting: dict[Future, tuple[MutationRequest, MutationResult, dict[str, Any]] | Program] = {}

        def queue_children(indices: list[int], results: list[MutationResult]) -> None:
            failed, jobs = self._child_jobs([requests[i] for i in indices], results)
            programs.extend(failed)
            for job, item in jobs:
                waiting[pool.submit(job)] = item

        try:
            queue_children(fast, self.mutator.make([requests[i] for i in fast]))
            for program in validate:
                waiting[pool.submit(self.validator.job(program))] = program
            while waiting or llm is not None:
                done, _ = wait([*waiting, *([llm] if llm is not None else [])], return_when=FIRST_COMPLETED)
                for finished in done:
                    if finished is llm:
                        queue_children(slow, llm.result())
                        llm = None
                        continue
                    item = waiting.pop(finished)
                    error = finished.exception()
                    outcome = error if error is not None else finished.result()
                    if isinstance(item, Program):
                        self.validator.record(item, outcome, at_iteration)
                    else:
                        programs.append(self._commit_child(item, outcome))
        finally:
            if llm is not None:
                llm.result()
        return programs

    def _child_jobs(
        self, requests: list[MutationRequest], results: list[MutationResult]
    ) -> tuple[list[Program], list[tuple[EvalJob, tuple[MutationRequest, MutationResult, dict[str, Any]]]]]:
        """The children whose mutation failed (committed here), and a job for each of the others."""
        failed: list[Program] = []
        jobs = []

        def unevaluated(request, result, info, code, salt, artifacts) -> None:
            # A child that is not evaluated: a failed mutation, or one the novelty filter rejected.
            program = Program(
                id=program_id(self.seed, request.iteration, code + salt),
                code=code,
                iteration=request.iteration,
                parent_id=request.parent.id,
                generation=request.parent.generation + 1,
                island=request.island,
                mutation=info,
                status="mutation_failed",
                artifacts={
                    **artifacts,
                    **({"llm_response": result.llm_response} if result.llm_response else {}),
                },
            )
            self.store.add(program)
            self._count(program)
            failed.append(program)

        for request, result in zip(requests, results):
            redrawn: list[str] = []
            if self.novelty is not None and result.code is not None:
                verdict = self._novelty_check(request, result)
                attempt = 0
                duplicated: list[str] = []  # the operators whose children were rejected
                # A duplicate made by an LLM-free operator is drawn again (it costs no model call).
                while (
                    not verdict.novel
                    and request.kind in AST_FALLBACK_KINDS
                    and attempt < self.config.novelty.redraws
                ):
                    attempt += 1
                    duplicated.append(str(result.info.get("kind", request.kind)))
                    again = self.mutator.redraw(request, attempt, duplicated)
                    if again.code is None:
                        continue
                    redrawn.append(verdict.reason)
                    result, verdict = again, self._novelty_check(request, again)
            info = {**result.info, "selection": request.strategy}
            if redrawn:
                info["redrawn"] = redrawn
            if result.code is None:
                failure = {"failure": result.failure or "mutation failed"}
                unevaluated(request, result, info, request.parent.code, "\0failed", failure)
                continue
            if self.novelty is not None:
                if not verdict.novel:
                    # Not evaluated: the database already holds this program (or one nearly the same).
                    info["novelty"] = {
                        "nearest": verdict.nearest_id,
                        "similarity": round(verdict.similarity, 6),
                    }
                    reason = {"failure": f"novelty: {verdict.reason}", "novelty": verdict.reason}
                    unevaluated(request, result, info, result.code, "\0rejected", reason)
                    continue
            if self.novelty is not None:
                self._queued.setdefault(code_hash(result.code), request.iteration)
            jobs.append((self._job(result.code, request.iteration), (request, result, info)))
        return failed, jobs

    def _novelty_check(self, request: MutationRequest, result: MutationResult) -> NoveltyVerdict:
        """The novelty filter's verdict on a made child (exact duplicates only for the ``exact_only`` kinds).

        The filter learns a program once it is evaluated; a child that repeats one queued for evaluation
        before it (a sibling of its batch, say) is an exact duplicate too.
        """
        assert self.novelty is not None and result.code is not None
        kind = result.info.get("kind", request.kind)
        verdict = self.novelty.check(result.code, exact_only=kind in self.config.novelty.exact_only)
        if verdict.novel:
            queued = self._queued.get(code_hash(result.code))
            if queued is not None:
                return NoveltyVerdict(
                    False, f"exact duplicate of the child of iteration {queued}, queued before it", None, 1.0
                )
        return verdict

    def _commit_child(
        self,
        item: tuple[MutationRequest, MutationResult, dict[str, Any]],
        outcome: EvalOutcome | BaseException,
    ) -> Program:
        """Store one evaluated child (at once: a killed run keeps it)."""
        request, result, info = item
        if isinstance(outcome, BaseException):
            outcome = EvalOutcome(
                "failed", artifacts={"failure": f"executor error: {type(outcome).__name__}: {outcome}"}
            )
        self.note_sandbox(outcome.sandbox)
        assert result.code is not None
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
        return program

    def _evaluate_children(
        self,
        requests: list[MutationRequest],
        results: list[MutationResult],
        validate: list[Program],
        at_iteration: int,
    ) -> list[Program]:
        programs, pending = self._child_jobs(requests, results)
        jobs = [job for job, _ in pending]
        children = len(jobs)
        jobs += [self.validator.job(p) for p in validate]
        size, workers = self.config.evaluator.group_size, self.config.evaluator.parallel_evaluations
        for index, outcome in map_grouped(self.pool or self.executor, jobs, size, workers):
            if index >= children:
                self.validator.record(validate[index - children], outcome, at_iteration)
                continue
            programs.append(self._commit_child(pending[index][1], outcome))
        return programs

    def _safe_evaluate(
        self, code: str, iteration: int, thresholds: tuple[float, ...] | None = None
    ) -> EvalOutcome:
        try:
            return run_evaluation(self._job(code, iteration, thresholds))
        except Exception as exc:
            return EvalOutcome(
                "failed", artifacts={"failure": f"evaluation error: {type(exc).__name__}: {exc}"}
            )

    def _thresholds(self) -> tuple[float, ...]:
        """The cascade thresholds of this batch's jobs, with successive halving's gate when it is on.

        The gate before the last stage lets a candidate through when its score
        there is among the best ``halving_keep`` of the scores recorded there by
        the programs applied so far (ASHA's promotion rule, Li et al. 2020),
        once ``halving_min_scores`` are recorded; a fixed threshold configured
        for that gate still applies. The scores come from the programs applied
        in iteration order, so a resumed run computes the same thresholds.
        """
        ev = self.config.evaluator
        gates = len(self.evaluator.stages) - 1
        thresholds = [float(t) for t in ev.cascade_thresholds[:gates]]
        if ev.halving_keep is None or gates < 1:
            return tuple(thresholds)
        thresholds += [float("-inf")] * (gates - len(thresholds))
        scores = sorted(self._rung_scores, reverse=True)
        if len(scores) >= ev.halving_min_scores:
            cut = scores[max(0, math.ceil(ev.halving_keep * len(scores)) - 1)]
            thresholds[-1] = max(thresholds[-1], cut)
        return tuple(thresholds)

    def _kept_artifacts(self, artifacts: dict[str, str]) -> dict[str, str]:
        """What ``evaluator.enable_artifacts`` and ``max_artifact_storage`` let a program keep."""
        ev = self.config.evaluator
        if not ev.enable_artifacts:
            return {k: v for k, v in artifacts.items() if k in ("failure", "cascade")}
        budget = ev.max_artifact_storage
        if sum(len(v) for v in artifacts.values()) <= budget:
            return dict(artifacts)
        # Over the budget: the reasons first, then the others shortest first; what does not fit is cut.
        kept: dict[str, str] = {}
        order = sorted(artifacts, key=lambda k: (k not in ("failure", "cascade"), len(artifacts[k]), k))
        for key in order:
            room = budget - sum(len(v) for v in kept.values())
            value = artifacts[key]
            kept[key] = (
                value if len(value) <= room else ("..." + value[-max(room - 3, 0) :] if room > 3 else "")
            )
        return {k: kept[k] for k in artifacts}

    def _job(self, code: str, iteration: int, thresholds: tuple[float, ...] | None = None) -> EvalJob:
        """The evaluation of the program ``code`` made at ``iteration``, seeded from the run's seed and its id."""
        seed = evaluation_seed(self.seed, program_id(self.seed, iteration, code))
        return self.evaluator.job(code, self._thresholds() if thresholds is None else thresholds, seed=seed)

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
            artifacts=self._kept_artifacts(outcome.artifacts),
            evaluated_at=time.time(),
            eval_seconds=outcome.seconds,
            stage_scores=dict(outcome.stage_scores),
            stopped_at=outcome.stopped_at if ok else None,
        )

    def _count(self, program: Program) -> None:
        if program.mutation.get("kind") in LLM_KINDS:
            failure = program.failure or ""
            if program.status == "mutation_failed" and failure.startswith("LLM error"):
                self._llm_error_streak += 1
                self._llm_last_error = failure
            else:  # the backend answered (even if the answer was unusable)
                self._llm_error_streak = 0
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

    def _apply(self, programs: list[Program], *, to_board: bool = True) -> None:
        """Enter programs into the islands in iteration order and log them to metrics.jsonl
        (and, with ``to_board``, to the TensorBoard event files)."""
        with (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") as log:
            for program in programs:
                self._count_operator(program)
                self._learn(program)
                self.population.add(program)
                rung = program.stage_scores.get(self._rung_stage) if self._rung_stage else None
                if program.status == "ok" and rung is not None:
                    self._rung_scores.append(rung)
                if program.ok:
                    self._cmaes_origins.setdefault(program.id, program)
                origin = (program.mutation.get("cmaes") or {}).get("origin")
                if origin is not None:
                    self._cmaes_children.setdefault(origin, []).append(program)
                best = self.population.best()
                if to_board and program.iteration > 0:
                    self.board.scalars(
                        {
                            "fitness": program.fitness,
                            "best_fitness": best.fitness if best else None,
                            "eval_seconds": program.eval_seconds,
                        },
                        program.iteration,
                        prefix="search/",
                    )
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

    def _learn(self, program: Program) -> None:
        """What the novelty filter and the bandit learn from a program (before it enters the islands)."""
        if self.novelty is not None and program.status != "mutation_failed":
            # The filter holds it from now on: it is no longer only queued.
            self._queued.pop(self.novelty.add(program.id, program.code), None)
        self._credit_sites(program)
        if self.bandit is None or program.iteration <= 0:
            return
        planned = program.mutation.get("planned")
        if planned is not None:
            # The operator drawn first found nothing to change and handed over: a pull without a result.
            first = self.mutator.arm_of({"kind": planned})
            if first is not None and first in self.bandit.arms:
                self.bandit.update(first, None)
        arm = self.mutator.arm_of(program.mutation)
        if arm is None or arm not in self.bandit.arms:
            return
        # Improvement over its parents: a crossover's second parent counts too, or copying a better
        # donor's hook would earn the credit of a discovery.
        parents = [
            self.population.programs.get(str(pid))
            for pid in (program.parent_id, program.mutation.get("donor_id"))
            if pid is not None
        ]
        known = [p for p in parents if p is not None and p.fitness is not None]
        best_parent = max(known, key=self.population.rank_key) if known else None
        child = program.fitness if program.ok else None
        # A child the cascade stopped early is scored on fewer stages than its parent: not an improvement.
        comparable = program.complete or (best_parent is not None and not best_parent.complete)
        self.bandit.update(
            arm,
            improvement(child if comparable else None, best_parent.fitness if best_parent else None),
        )

    def _credit_sites(self, program: Program) -> None:
        """Credit the literals a ``constant`` child changed (and the table move a ``table`` child made):
        kept when the child, fully evaluated, is at least as fit as its parent and its evaluator reported no
        ``error`` (OpenEvolve's evaluators score an invalid program 0 with an ``error`` entry). A failure, or
        a child the cascade stopped early, is not kept. Changes made to a working parent (scored, no
        ``error``) are also counted apart, with those of them that broke it (a failure or an ``error``):
        the entry is ``[tries, kept, tries on a working parent, of them broken]``
        (:func:`~societas.evolve.mutation.exhausted`)."""
        credit, sites = self.mutator.site_credit, program.mutation.get("sites")
        if credit is None or not sites or program.status == "mutation_failed":
            return
        parent = self.population.programs.get(str(program.parent_id))
        if parent is None or parent.fitness is None:
            return
        kept = bool(
            program.ok
            and program.complete
            and "error" not in program.artifacts
            and program.fitness is not None
            and program.fitness >= parent.fitness
        )
        working = parent.ok and "error" not in parent.artifacts
        broken = not program.ok or "error" in program.artifacts
        for key in sites:
            entry = credit.setdefault(str(key), [0, 0, 0, 0])
            entry[0] += 1
            entry[1] += kept
            entry[2] += working
            entry[3] += working and broken

    def _count_operator(self, program: Program) -> None:
        """Count a child (iteration > 0) for its mutation kind (before it enters the islands)."""
        if program.iteration <= 0:
            return
        row = self._operators.setdefault(
            str(program.mutation.get("kind", "?")), {"children": 0, "valid": 0, "evaluated": 0, "improved": 0}
        )
        row["children"] += 1
        row["valid"] += program.status != "mutation_failed"
        row["evaluated"] += program.ok
        parent = self.population.programs.get(program.parent_id or "")
        row["improved"] += bool(
            program.fitness is not None
            and parent is not None
            and parent.fitness is not None
            and program.fitness > parent.fitness
        )

    def _board_batch(self, step: int, evaluations: int | None = None, seconds: float = 0.0) -> None:
        """The islands, the counts and the operators' rates at iteration ``step`` (after a batch)."""
        if not self.board.enabled:
            return
        values: dict[str, float | None] = {}
        programs = self.population.programs
        for island in self.population.islands:
            fits = [f for f in (programs[pid].fitness for pid in island.members) if f is not None]
            key = f"islands/{island.index}"
            values[f"{key}/best_fitness"] = max(fits) if fits else None
            values[f"{key}/mean_fitness"] = sum(fits) / len(fits) if fits else None
            values[f"{key}/size"] = len(island.members)
        if step <= 0:  # a child's point holds it from iteration 1 on
            best = self.population.best()
            values["search/best_fitness"] = best.fitness if best else None
        if evaluations is not None and seconds > 0:
            values["search/evaluations_per_min"] = 60.0 * evaluations / seconds
        ok, failed, bad = self.counts["ok"], self.counts["failed"], self.counts["mutation_failed"]
        values["search/evaluated"] = ok + failed
        values["search/failed"] = failed
        values["search/mutation_failed"] = bad
        values["search/failure_rate"] = (failed + bad) / (ok + failed + bad) if ok + failed + bad else None
        if self.bandit is not None:
            for arm, weight in self.bandit.weights().items():
                values[f"adaptive/{arm}/weight"] = weight
        for kind, row in self._operators.items():
            values[f"operators/{kind}/children"] = row["children"]
            values[f"operators/{kind}/valid_rate"] = row["valid"] / row["children"]
            values[f"operators/{kind}/improved_rate"] = row["improved"] / row["children"]
        self.board.scalars(values, step)
        self.board.flush()  # a batch takes seconds to minutes: a live TensorBoard shows each one

    def result(self) -> RunResult:
        programs = self.store.programs()
        best = self.chosen()
        top = self.population.best()
        seed = next((p for p in programs if p.iteration == 0), None)
        record = self.validator.records.get(best.id) if best is not None else None
        return RunResult(
            best_score=best.fitness if best else None,
            best_training_score=top.fitness if top else None,
            validation_score=record.score if record is not None else None,
            selected_by="validation" if record is not None and record.score is not None else "training",
            seed_score=seed.fitness if seed else None,
            evaluated=sum(p.status in ("ok", "failed") for p in programs),
            failed=sum(p.status != "ok" for p in programs),
            mutation_failed=sum(p.status == "mutation_failed" for p in programs),
            iterations=max((p.iteration for p in programs), default=0),
            run_dir=str(self.run_dir),
            best_id=best.id if best else None,
            sandbox_backends=sorted(self.sandbox_backends),
        )

    def close(self) -> None:
        """Stop the executor, close the store and release the run directory's lock."""
        try:
            self.board.close()
            self._side.shutdown(wait=True)
            if self.pool is not None:
                self.pool.close()
            self.executor.close()
            self.store.close()
        finally:
            self.lock.release()
