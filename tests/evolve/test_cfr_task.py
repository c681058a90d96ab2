"""The built-in CFR discovery task: the seed is CFR+ and is scored in the sandbox."""

from __future__ import annotations

import random

import pytest

from evolve.config import load_config
from evolve.evaluator import TaskEvaluator
from evolve.mutation import perturb_constants
from evolve.program import frozen_parts_equal
from evolve.task import load_task


@pytest.mark.slow
def test_seed_is_cfr_plus_and_stage1_scores_it_in_the_sandbox():
    from marl.games import CFRSolver, get_algorithm

    task = load_task("cfr")
    cfg = load_config(task.config_path)
    assert cfg.evaluator.memory_mb >= 1024          # importing torch in the sandbox needs it
    evaluator = TaskEvaluator(task.evaluator_path, cfg.evaluator)
    assert evaluator.stages == ("evaluate_stage1", "evaluate")
    job = evaluator.job(task.initial_program)
    from dataclasses import replace

    from evolve.evaluator import run_evaluation

    out = run_evaluation(replace(job, stages=("evaluate_stage1",)))
    assert out.status == "ok", out.failure
    expected = CFRSolver("kuhn_poker(players=3)", get_algorithm("cfr+"), device="cpu").run(100).exploitability[0]
    assert out.metrics["combined_score"] == pytest.approx(-expected, rel=1e-9, abs=1e-12)
    assert out.metrics["neg_expl_kuhn_poker_players_3"] == out.metrics["combined_score"]


@pytest.mark.slow
def test_a_perturbed_seed_is_a_different_valid_algorithm():
    task = load_task("cfr")
    cfg = load_config(task.config_path)
    assert cfg.mutation.perturb_ints is False     # the task's integers are tensor dimensions
    child, _ = perturb_constants(task.initial_program, random.Random(1), cfg)
    assert frozen_parts_equal(task.initial_program, child) and child != task.initial_program
    from dataclasses import replace

    from evolve.evaluator import run_evaluation

    job = TaskEvaluator(task.evaluator_path, cfg.evaluator).job(child)
    out = run_evaluation(replace(job, stages=("evaluate_stage1",)))
    assert out.status == "ok", out.failure
    assert out.metrics["combined_score"] < 0
