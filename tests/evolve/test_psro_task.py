"""The built-in PSRO discovery task: the uniform seed scores exactly like PSRO(uniform, uniform), in the sandbox."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from societas.evolve.config import load_config
from societas.evolve.evaluator import TaskEvaluator, run_evaluation, run_group
from societas.evolve.held_out import held_out_baselines, supports_held_out
from societas.evolve.task import load_task

GAME = "kuhn_poker(players=3)"


def _job(code, stage, **settings):
    task = load_task("psro")
    cfg = load_config(task.config_path)
    cfg.evaluator.task_settings = {**cfg.evaluator.task_settings, **settings}
    job = TaskEvaluator(task.evaluator_path, cfg.evaluator).job(code)
    return replace(job, stages=(stage,), thresholds=())


def test_task_layout_and_baselines():
    task = load_task("psro")
    cfg = load_config(task.config_path)
    assert cfg.evaluator.memory_mb >= 1024
    assert TaskEvaluator(task.evaluator_path, cfg.evaluator).stages == ("evaluate_stage1", "evaluate")
    assert supports_held_out(task.evaluator_path)
    baselines = held_out_baselines(task.evaluator_path)
    assert {"uniform", "prd", "rm", "shor-psro"} <= set(baselines)
    assert set(cfg.held_out.baselines) <= set(baselines)


@pytest.mark.slow
def test_the_seed_and_a_baseline_score_exactly_in_one_warm_sandbox():
    """The seed is uniform PSRO and a baseline program its meta-solver, bit for bit, scored together
    in one sandbox whose warm_up() built the game trees once; a candidate that writes into those
    trees spoils only its own copy (each candidate is a fork of the warmed-up harness)."""
    from societas.marl.games.psro import run_psro

    task = load_task("psro")
    vandal = task.initial_program.replace(
        "def build_meta_solvers():\n",
        "def build_meta_solvers():\n"
        "    import gc\n"
        "    for tree in [o for o in gc.get_objects() if type(o).__name__ == 'GameTree']:\n"
        "        tree.utility.zero_()  # writes into the shared game trees\n",
        1,
    )
    assert vandal != task.initial_program
    # SHOR-PSRO: the baseline quickest to score here (3 s; PRD takes 18 s, RM 14 s)
    shor = held_out_baselines(task.evaluator_path)["shor-psro"]
    jobs = [
        _job(code, "evaluate_stage1", stage1_iterations=3) for code in (task.initial_program, vandal, shor)
    ]
    assert json.loads(jobs[0].task_settings)["stage1_iterations"] == 3
    seed, spoiled, baseline, seed_again = run_group([*jobs, jobs[0]])
    assert [o.status for o in (seed, spoiled, baseline, seed_again)] == ["ok"] * 4, spoiled.failure
    expected = run_psro(GAME, 3, "uniform", "uniform", device="cpu", seed=0).exploitability[-1]
    assert expected > 0
    assert seed.metrics["neg_expl_kuhn_poker_players_3"] == -expected  # bit for bit
    assert seed.metrics["combined_score"] == -expected
    assert seed_again.metrics == seed.metrics
    assert spoiled.metrics != seed.metrics
    expected = run_psro(GAME, 3, "shor-train", "shor-eval", device="cpu", seed=0).exploitability[-1]
    assert baseline.metrics["combined_score"] == pytest.approx(-expected, rel=1e-12)


@pytest.mark.slow
def test_invalid_meta_strategy_fails_with_the_reason():
    task = load_task("psro")
    bad = task.initial_program.replace(
        "weights = np.exp(0.0 * (u - u.max()))\n            strategies.append(weights / weights.sum())\n"
        "        return strategies\n\n\n# EVOLVE",
        "weights = np.exp(0.0 * (u - u.max()))\n            strategies.append(weights)\n        return strategies\n\n\n# EVOLVE",
    )
    assert bad != task.initial_program
    out = run_evaluation(_job(bad, "evaluate_stage1", stage1_iterations=2))
    assert out.status == "failed"
    assert "evaluation meta-solver" in out.failure and "not 1" in out.failure


@pytest.mark.slow
def test_a_short_search_improves_on_the_seed_and_reports_held_out(tmp_path):
    """The demo configuration, cut to a few candidates and PSRO iterations:
    LLM-free mutations of the uniform seed find a better pair of meta-solvers
    (the seed's inverse temperatures 0.0 move away from uniform), and the
    report scores the seed, the best program and a baseline on the held-out
    games."""
    from pathlib import Path

    from societas.evolve.controller import Controller
    from societas.evolve.executors import ProcessExecutor
    from societas.evolve.report import write_report

    task = load_task("psro")
    cfg = load_config(Path(task.config_path).with_name("demo.yaml"))
    cfg.max_iterations = 8
    cfg.database.migration_interval = 4
    cfg.mutation.weights = {"constant": 1.0}  # no LLM in unit tests
    cfg.evaluator.cascade_thresholds = [-1.0]
    cfg.evaluator.task_settings = {"iterations": 8, "stage1_iterations": 3, "held_out_iterations": 2}
    cfg.held_out.baselines = ["shor-psro"]  # the quickest baseline that differs from the uniform seed
    controller = Controller(task, cfg, tmp_path / "run", executor=ProcessExecutor(2))
    try:
        result = controller.run()
    finally:
        controller.close()
    assert result.evaluated == 9 and result.failed == 0
    assert result.best_score > result.seed_score

    figures = write_report(tmp_path / "run")
    held = figures["held_out"]
    assert set(held) == {"seed", "shor-psro", next(k for k in held if k.startswith("best evolved"))}
    assert all(value is not None and value < 0 for value in held.values())
    summary = (Path(figures["run_dir"]) / "summary.md").read_text()
    assert "## Held-out set" in summary and "neg_expl_leduc_poker_players_3" in summary
