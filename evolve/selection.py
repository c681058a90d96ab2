"""Choosing the program a run returns on validation games, apart from training and held-out.

A search optimises the training fitness, so its best program there is also
the one most fitted to the training games' quirks. A task that defines
``evaluate_validation(program_path)`` in its ``evaluator.py`` gives a third
set of games: whenever a program enters the best ``validation.top_programs``
distinct programs by training fitness, it is scored there (in the sandbox,
like every evaluation), and the run returns the program with the best
validation score (ties: the better training fitness, then the older
program). The held-out games stay for reporting only.

The records are kept in the run's program store (metadata key
``validation``), written after every result, so a killed run loses none and
a resumed one does not redo them. Validation never feeds back into the
search (parents, islands and mutations see training fitness only), so a
run's programs do not depend on it; only the returned program does.
"""

from __future__ import annotations

import ast
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .config import EvolveConfig
from .database import Population, ProgramStore
from .evaluator import EvalJob, EvalOutcome, TaskEvaluator, WarmPool, map_grouped
from .executors import Executor
from .program import Program, fitness_of, parse_python

logger = logging.getLogger(__name__)

__all__ = [
    "STAGE",
    "ValidationRecord",
    "Validator",
    "chosen_from",
    "defines_stage",
    "history_from",
    "load_records",
]

STAGE = "evaluate_validation"
_META = "validation"


def defines_stage(evaluator_path: str | Path, name: str) -> bool:
    """True when the evaluator file defines (or imports) a top-level function ``name``."""
    path = Path(evaluator_path)
    tree = parse_python(path.read_text(encoding="utf-8"), filename=str(path))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    return name in defined | imported


@dataclass
class ValidationRecord:
    program_id: str
    iteration: int  # the program's iteration
    training_fitness: float | None
    status: str  # "ok" | "failed"
    score: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    validated_at_iteration: int = 0  # how far the run had got when it was validated
    seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationRecord:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class Validator:
    """Keeps the validation records of one run and picks the program it returns."""

    def __init__(
        self,
        evaluator: TaskEvaluator,
        config: EvolveConfig,
        store: ProgramStore,
        executor: Executor | WarmPool,
    ) -> None:
        self.config = config
        self.store = store
        self.executor = executor
        self.enabled = config.validation.enabled and defines_stage(evaluator.path, STAGE)
        template = evaluator.job("")
        self.template = replace(
            template,
            stages=(STAGE,),
            thresholds=(),
            timeout_s=config.validation.timeout or config.evaluator.timeout,
        )
        self.records = load_records(store)

    def _save(self) -> None:
        self.store.set_meta(_META, {pid: asdict(r) for pid, r in self.records.items()})

    def candidates(self, population: Population) -> list[Program]:
        """The best ``top_programs`` distinct programs (by code) on the training fitness."""
        ranked = sorted(
            (p for p in population.programs.values() if p.ok and p.complete),
            key=population.rank_key,
            reverse=True,
        )
        chosen: list[Program] = []
        codes: set[str] = set()
        for program in ranked:
            if len(chosen) >= self.config.validation.top_programs:
                break
            if program.code not in codes:
                codes.add(program.code)
                chosen.append(program)
        return chosen

    def due(self, population: Population) -> list[Program]:
        """The training top programs not validated yet (none when validation is off)."""
        if not self.enabled:
            return []
        return [p for p in self.candidates(population) if p.id not in self.records]

    def job(self, program: Program) -> EvalJob:
        return replace(self.template, code=program.code)

    def record(
        self, program: Program, outcome: EvalOutcome | BaseException, at_iteration: int
    ) -> ValidationRecord:
        """Keep the validation result of ``program`` (saved at once: a killed run keeps it)."""
        if isinstance(outcome, BaseException):
            outcome = EvalOutcome("failed", artifacts={"failure": f"executor error: {outcome}"})
        ok = outcome.status == "ok"
        record = ValidationRecord(
            program_id=program.id,
            iteration=program.iteration,
            training_fitness=program.fitness,
            status=outcome.status,
            score=fitness_of(outcome.metrics) if ok else None,
            metrics=outcome.metrics if ok else {},
            failure=outcome.failure,
            validated_at_iteration=at_iteration,
            seconds=round(outcome.seconds, 3),
        )
        if not ok:
            logger.warning("validation of program %s failed: %s", program.id, outcome.failure)
        self.records[program.id] = record
        self._save()
        return record

    def update(self, population: Population, at_iteration: int) -> list[ValidationRecord]:
        """Validate the current training top programs not validated yet; return the new records."""
        todo = self.due(population)
        if not todo:
            return []
        jobs = [self.job(p) for p in todo]
        return [
            self.record(todo[index], outcome, at_iteration)
            for index, outcome in map_grouped(
                self.executor,
                jobs,
                self.config.evaluator.group_size,
                self.config.evaluator.parallel_evaluations,
            )
        ]

    def chosen_id(self) -> str | None:
        """The program the run returns: the best validation score (None when nothing is validated)."""
        return chosen_from(self.records)

    def history(self) -> list[ValidationRecord]:
        return history_from(self.records)


def load_records(store: ProgramStore) -> dict[str, ValidationRecord]:
    """The validation records stored in a run's program store."""
    stored = store.get_meta(_META, None) or {}
    return {pid: ValidationRecord.from_dict(data) for pid, data in stored.items()}


def _rank(record: ValidationRecord) -> tuple[float, float, int]:
    """Validation score, then training fitness, then the older program."""
    assert record.score is not None
    training = record.training_fitness if record.training_fitness is not None else float("-inf")
    return (record.score, training, -record.iteration)


def chosen_from(records: dict[str, ValidationRecord]) -> str | None:
    """The id of the best validated program (None when none validated successfully)."""
    scored = [r for r in records.values() if r.status == "ok" and r.score is not None]
    return max(scored, key=_rank).program_id if scored else None


def history_from(records: dict[str, ValidationRecord]) -> list[ValidationRecord]:
    """The validation-best program over the run: each record that was the best when it was validated.

    Records are taken in the order the run validated them (then by
    iteration), so the last entry is :func:`chosen_from`'s record.
    """
    ordered = sorted(
        (r for r in records.values() if r.status == "ok" and r.score is not None),
        key=lambda r: (r.validated_at_iteration, r.iteration),
    )
    chain: list[ValidationRecord] = []
    for record in ordered:
        if not chain or _rank(record) > _rank(chain[-1]):
            chain.append(record)
    return chain
