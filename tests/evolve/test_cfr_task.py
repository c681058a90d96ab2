"""The built-in CFR discovery task: the seed is CFR+ and is scored in the sandbox."""

from __future__ import annotations

import random

import pytest

from societas.evolve.config import load_config
from societas.evolve.evaluator import TaskEvaluator
from societas.evolve.mutation import perturb_constants
from societas.evolve.program import frozen_parts_equal
from societas.evolve.task import load_task


@pytest.mark.slow
def test_seed_is_cfr_plus_and_stage1_scores_it_in_the_sandbox():
    from societas.marl.games import CFRSolver, get_algorithm

    task = load_task("cfr")
    cfg = load_config(task.config_path)
    assert cfg.evaluator.memory_mb >= 1024  # importing torch in the sandbox needs it
    evaluator = TaskEvaluator(task.evaluator_path, cfg.evaluator)
    assert evaluator.stages == ("evaluate_stage1", "evaluate_stage2", "evaluate_stage3")
    job = evaluator.job(task.initial_program)
    from dataclasses import replace

    from societas.evolve.evaluator import run_evaluation

    out = run_evaluation(replace(job, stages=("evaluate_stage1",)))
    assert out.status == "ok", out.failure
    expected = (
        CFRSolver("kuhn_poker(players=3)", get_algorithm("cfr+"), device="cpu").run(100).exploitability[0]
    )
    assert out.metrics["combined_score"] == pytest.approx(-expected, rel=1e-9, abs=1e-12)
    assert out.metrics["neg_expl_kuhn_poker_players_3"] == out.metrics["combined_score"]


@pytest.mark.slow
def test_a_perturbed_seed_is_a_different_valid_algorithm():
    task = load_task("cfr")
    cfg = load_config(task.config_path)
    assert cfg.mutation.perturb_ints is False  # the task's integers are tensor dimensions
    child, _ = perturb_constants(task.initial_program, random.Random(1), cfg)
    assert frozen_parts_equal(task.initial_program, child) and child != task.initial_program
    from dataclasses import replace

    from societas.evolve.evaluator import run_evaluation

    job = TaskEvaluator(task.evaluator_path, cfg.evaluator).job(child)
    out = run_evaluation(replace(job, stages=("evaluate_stage1",)))
    assert out.status == "ok", out.failure
    assert out.metrics["combined_score"] < 0


def test_seed_hooks_are_cfr_plus_bit_for_bit_on_every_training_game():
    """The seed (regret matching+ as its one building block, weight t**1.0) is CFR+ in floating point too."""
    import importlib.util

    from societas.evolve.tasks.cfr.evaluator import TRAIN_GAMES
    from societas.marl.games import CFRSolver, get_algorithm

    task = load_task("cfr")
    spec = importlib.util.spec_from_file_location("cfr_seed", task.directory / "initial_program.py")
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    for game in TRAIN_GAMES:
        ours = CFRSolver(game, seed.build_algorithm(30), device="cpu").run(30).exploitability[0]
        reference = CFRSolver(game, get_algorithm("cfr+"), device="cpu").run(30).exploitability[0]
        assert float(ours) == float(reference), game


def test_baselines_are_offered_as_programs_and_the_horizon_reaches_them(tmp_path):
    from societas.evolve.held_out import held_out_baselines
    from societas.evolve.tasks.cfr import evaluator as cfr_evaluator

    task = load_task("cfr")
    baselines = held_out_baselines(task.evaluator_path)
    assert {"cfr", "cfr+", "dcfr", "pcfr+", "dpcfr+", "hs-pcfr+", "vad-cfr"} <= set(baselines)
    path = tmp_path / "program.py"
    path.write_text(baselines["vad-cfr"])
    (tmp_path / "task_settings.json").write_text('{"held_out_iterations": 40}')
    assert cfr_evaluator.settings(str(path))["held_out_iterations"] == 40
    algorithm = cfr_evaluator.load_builder(str(path), 40)()
    assert algorithm.name == "vad-cfr"
    (tmp_path / "task_settings.json").write_text('{"iteratons": 40}')
    with pytest.raises(ValueError, match="unknown cfr task setting"):
        cfr_evaluator.settings(str(path))


def test_stage2_then_stage3_is_the_full_evaluation_bit_for_bit(tmp_path):
    # Successive halving's rung is the first part of the very run stage 3 finishes.
    from societas.evolve.tasks.cfr import evaluator as cfr_evaluator
    from societas.marl.games import CFRSolver
    from societas.marl.games.suites import TRAINING_GAMES

    task = load_task("cfr")
    path = tmp_path / "program.py"
    path.write_text((task.directory / "seeds" / "dpcfr_plus.py").read_text())
    (tmp_path / "task_settings.json").write_text('{"iterations": 30, "halving_iterations": 7}')
    program = str(path)
    rung = cfr_evaluator.evaluate_stage2(program)
    full = cfr_evaluator.evaluate_stage3(program)
    assert full == cfr_evaluator.evaluate(program)
    assert program not in cfr_evaluator._STARTED  # stage 3 took stage 2's solvers
    assert cfr_evaluator.evaluate_stage3(program) == full  # alone, stage 3 runs the whole thing
    builder = cfr_evaluator.load_builder(program, 30)
    for game in TRAINING_GAMES:
        name = cfr_evaluator.metric_name(game)
        short = CFRSolver(game, builder(), device="cpu").run(7).exploitability[0]
        assert rung[name] == -short
        assert full[name] != rung[name]
    assert rung["combined_score"] < full["combined_score"]
    (tmp_path / "task_settings.json").write_text('{"iterations": 30, "halving_iterations": 31}')
    with pytest.raises(ValueError, match="halving_iterations must be a whole number from 1 to iterations"):
        cfr_evaluator.settings(program)
