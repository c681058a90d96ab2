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

Importing the package stays light: a task's evaluator imports
``societas.evolve.task_settings`` inside every sandboxed evaluation, so the
modules that pull in the LLM stack or matplotlib (the controller, the
mutations, the report) load on first use of their names (PEP 562).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .config import ConfigError, EvolveConfig, load_config, parse_config
from .database import Population, ProgramStore
from .evaluator import EvalOutcome, TaskError, TaskEvaluator, run_evaluation
from .executors import ExecutorError, ProcessExecutor, RayExecutor, make_executor
from .program import (
    Program,
    extract_evolve_blocks,
    find_evolve_blocks,
    fitness_of,
    replace_evolve_blocks,
)
from .task import Task, load_task

if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from .controller import Controller, RunError, RunResult
    from .mutation import LLMEnsemble, MutationError, Mutator, apply_llm_answer
    from .report import write_report

_LAZY = {
    "Controller": "controller",
    "RunError": "controller",
    "RunResult": "controller",
    "LLMEnsemble": "mutation",
    "MutationError": "mutation",
    "Mutator": "mutation",
    "apply_llm_answer": "mutation",
    "write_report": "report",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
