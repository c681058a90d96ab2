"""societas.evolve — how algorithms are discovered.

AlphaEvolve-style search (Novikov et al., 2025; OpenEvolve) over algorithm
code: programs with EVOLVE-BLOCK regions (:mod:`societas.evolve.program`), a
persistent program database with MAP-Elites islands (Mouret & Clune 2015)
and ring migration (:mod:`societas.evolve.database`), LLM diff mutations and LLM-free
AST operators (:mod:`societas.evolve.mutation`), sandboxed cascade evaluation
(:mod:`societas.evolve.evaluator`), a local or Ray executor (:mod:`societas.evolve.executors`),
the loop itself (:mod:`societas.evolve.controller`), reports (:mod:`societas.evolve.report`,
with held-out scoring against baselines in :mod:`societas.evolve.held_out`) and the
discovery tasks of arXiv 2602.16928 (``evolve/tasks/``: ``cfr``, ``psro``). Task directories
written for OpenEvolve (``initial_program.py`` + ``evaluator.py`` +
``config.yaml``) run unchanged: ``python -m societas.evolve run TASK_DIR``.
"""

from .config import ConfigError, EvolveConfig, load_config, parse_config
from .controller import Controller, RunError, RunResult
from .database import Population, ProgramStore
from .evaluator import EvalOutcome, TaskError, TaskEvaluator, run_evaluation
from .executors import ExecutorError, ProcessExecutor, RayExecutor, make_executor
from .mutation import LLMEnsemble, MutationError, Mutator, apply_llm_answer
from .program import (
    Program,
    extract_evolve_blocks,
    find_evolve_blocks,
    fitness_of,
    replace_evolve_blocks,
)
from .report import write_report
from .task import Task, load_task

__all__ = [
    "ConfigError",
    "Controller",
    "EvalOutcome",
    "EvolveConfig",
    "ExecutorError",
    "LLMEnsemble",
    "MutationError",
    "Mutator",
    "Population",
    "ProcessExecutor",
    "Program",
    "ProgramStore",
    "RayExecutor",
    "RunError",
    "RunResult",
    "Task",
    "TaskError",
    "TaskEvaluator",
    "apply_llm_answer",
    "extract_evolve_blocks",
    "find_evolve_blocks",
    "fitness_of",
    "load_config",
    "load_task",
    "make_executor",
    "parse_config",
    "replace_evolve_blocks",
    "run_evaluation",
    "write_report",
]
