"""Evaluator of the CFR discovery task (arXiv 2602.16928), OpenEvolve interface.

The candidate's ``build_algorithm()`` must return a ``marl.games.Algorithm``;
it runs ``ITERATIONS`` iterations of ``CFRSolver`` on each training game and
the metrics are the per-game negative exploitability of the average policy
and their mean as ``combined_score`` (higher is better). ``evaluate_stage1``
is the cheap filter: ``STAGE1_ITERATIONS`` on 3-player Kuhn poker.
``evaluate_held_out`` scores the held-out games (not used for selection).
An optional ``settings.json`` next to this file overrides ``iterations``
and ``stage1_iterations``.
"""

import importlib.util
import json
import math
import os
import re

TRAIN_GAMES = [
    "kuhn_poker(players=3)",
    "leduc_poker",
    "goofspiel(num_cards=4,imp_info=True,points_order=descending)",
    "liars_dice(dice_sides=5)",
]
HELD_OUT_GAMES = [
    "kuhn_poker(players=4)",
    "leduc_poker(players=3)",
    "goofspiel(num_cards=5,imp_info=True,points_order=descending)",
    "liars_dice(dice_sides=6)",
]
ITERATIONS = 1000
STAGE1_ITERATIONS = 100

_settings = os.path.join(os.path.dirname(os.path.abspath(__file__)), "settings.json")
if os.path.exists(_settings):
    with open(_settings) as _handle:
        _values = json.load(_handle)
    ITERATIONS = int(_values.get("iterations", ITERATIONS))
    STAGE1_ITERATIONS = int(_values.get("stage1_iterations", STAGE1_ITERATIONS))


def metric_name(game):
    return "neg_expl_" + re.sub(r"\W+", "_", game).strip("_")


def load_algorithm(program_path):
    from marl.games import Algorithm

    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    algorithm = module.build_algorithm()
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"build_algorithm() returned {type(algorithm).__name__}, expected marl.games.Algorithm")
    return algorithm


def score(program_path, games, iterations):
    import torch

    from marl.games import CFRSolver

    torch.set_num_threads(1)
    algorithm = load_algorithm(program_path)
    metrics = {}
    for game in games:
        result = CFRSolver(game, algorithm, device="cpu").run(iterations)
        exploitability = float(result.exploitability[0])
        if not math.isfinite(exploitability):
            raise ValueError(f"exploitability on {game} is {exploitability}")
        metrics[metric_name(game)] = -exploitability
    metrics["combined_score"] = sum(metrics.values()) / len(games)
    return metrics


def evaluate_stage1(program_path):
    return score(program_path, TRAIN_GAMES[:1], STAGE1_ITERATIONS)


def evaluate(program_path):
    return score(program_path, TRAIN_GAMES, ITERATIONS)


def evaluate_held_out(program_path):
    return score(program_path, HELD_OUT_GAMES, ITERATIONS)
