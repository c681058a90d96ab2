"""Selection on validation games: what the run returns, what is stored, and what the report writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from societas.evolve.config import load_config
from societas.evolve.controller import Controller
from societas.evolve.executors import ProcessExecutor
from societas.evolve.report import write_report
from societas.evolve.selection import ValidationRecord, chosen_from, history_from, load_records
from societas.evolve.task import load_task

CURVE_FIT = Path(__file__).parent / "tasks" / "curve_fit"

# Validation far to the right (x in [2, 3]) and held-out further still: a program can fit the
# training range well and the validation range badly, so the two selections differ.
EXTRA = """


def evaluate_validation(program_path):
    xs = [2.0 + i / 10.0 for i in range(11)]
    mse = _mse(program_path, xs)
    return {"combined_score": 1.0 / (1.0 + mse)}


def evaluate_held_out(program_path):
    xs = [3.0 + i / 10.0 for i in range(11)]
    mse = _mse(program_path, xs)
    return {"combined_score": 1.0 / (1.0 + mse)}


def held_out_baselines():
    return {
        "exact": "def predict(xs):\\n    return [1.5 * x * x - 0.7 * x + 0.3 for x in xs]\\n",
        "zero": "def predict(xs):\\n    return [0.0 for x in xs]\\n",
    }
"""


@pytest.fixture
def task_dir(tmp_path):
    directory = tmp_path / "curve_fit_validated"
    shutil.copytree(CURVE_FIT, directory)
    with (directory / "evaluator.py").open("a") as handle:
        handle.write(EXTRA)
    return directory


def _record(pid, iteration, score, training, at):
    return ValidationRecord(pid, iteration, training, "ok", score, {}, None, at)


def test_the_choice_is_the_best_validation_score_and_the_history_its_improvements():
    records = {
        "a": _record("a", 0, 0.5, 0.1, 0),
        "b": _record("b", 3, 0.7, 0.2, 4),
        "c": _record("c", 5, 0.6, 0.9, 8),  # best on training, not on validation
        "d": _record("d", 9, 0.7, 0.3, 12),  # ties b on validation, better on training
        "e": ValidationRecord("e", 11, 0.95, "failed", None, {}, "boom", 12),
    }
    assert chosen_from(records) == "d"
    assert [r.program_id for r in history_from(records)] == ["a", "b", "d"]
    assert chosen_from({}) is None


def test_a_run_returns_the_validation_choice_and_the_report_writes_summary_json(task_dir, tmp_path):
    task = load_task(task_dir)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 12
    cfg.validation.top_programs = 3
    run_dir = tmp_path / "runs" / "r1"
    controller = Controller(task, cfg, run_dir, executor=ProcessExecutor(2))
    try:
        result = controller.run()
        programs = {p.id: p for p in controller.store.programs()}
        records = load_records(controller.store)
    finally:
        controller.close()
    assert result.selected_by == "validation"
    # Every validated program is among the run's best on training, and the choice is the best validated.
    assert len(records) >= 3
    best = max(records.values(), key=lambda r: (r.score, r.training_fitness, -r.iteration))
    assert result.best_id == best.program_id and result.validation_score == best.score
    assert result.best_score == programs[best.program_id].fitness
    assert result.best_training_score == max(p.fitness for p in programs.values() if p.ok)
    assert (run_dir / "best_program.py").read_text() == programs[result.best_id].code

    figures = write_report(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_id"] == result.best_id and summary["selected_by"] == "validation"
    for key in ("training_mean", "validation_mean", "held_out_mean"):
        assert {"seed", "best", "exact", "zero"} <= set(summary[key]), key
    assert summary["validation_mean"]["best"] == pytest.approx(best.score)
    assert summary["training_mean"]["exact"] == pytest.approx(1.0)  # the exact curve: zero error everywhere
    assert summary["held_out_mean"]["exact"] == pytest.approx(1.0)
    assert summary["held_out_mean"]["zero"] < summary["held_out_mean"]["exact"]
    children = [p for p in programs.values() if p.iteration > 0]
    ops = summary["operators"]
    assert sum(row["children"] for row in ops.values()) == len(children)
    for row in ops.values():
        assert row["children"] >= row["valid"] >= row["evaluated"] >= row["improved"] >= 0
    png = (run_dir / "plots" / "selection.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    text = (run_dir / "summary.md").read_text()
    assert "returned program: `" + result.best_id + "`" in text and "| exact | 1 | 1 | 1 |" in text
    assert figures["best_id"] == result.best_id


def test_validation_records_survive_a_resume(task_dir, tmp_path):
    task = load_task(task_dir)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 4
    run_dir = tmp_path / "r"
    first = Controller(task, cfg, run_dir, executor=ProcessExecutor(2))
    try:
        first.run()
        before = dict(first.validator.records)
    finally:
        first.close()
    assert before
    again = Controller.resume(run_dir, max_iterations=4, executor=ProcessExecutor(2))
    try:
        assert set(again.validator.records) == set(before)
        again.validator.executor = None  # nothing may be validated again
        result = again.run()
    finally:
        again.validator.executor = again.executor
        again.close()
    assert result.best_id == chosen_from(before)
