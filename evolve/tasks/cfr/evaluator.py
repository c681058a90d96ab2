"""Evaluator of the CFR discovery task (arXiv 2602.16928), OpenEvolve interface.

The candidate's ``build_algorithm()`` must return a ``societas.marl.games.Algorithm``
(it may take one argument, ``iterations``, the planned number of iterations,
for schedules that need the horizon). It runs ``iterations`` iterations of
``CFRSolver`` on each training game; the metrics are the per-game negative
exploitability of the average policy and their mean as ``combined_score``
(higher is better); an average policy with negative or non-finite entries
fails the candidate (its "exploitability" would mean nothing).
``evaluate_stage1`` is the cheap filter: ``stage1_iterations`` on 3-player
Kuhn poker. ``evaluate_stage2`` and ``evaluate_stage3`` are ``evaluate`` cut in
two, for successive halving on the iteration count: stage 2 runs the first
``halving_iterations`` of the training run (default ``iterations // 5``) and
scores the average policy there; stage 3 continues the same solvers to
``iterations`` (no iteration is run twice, and its metrics are bit for bit
``evaluate``'s). A run's ``evaluator.halving_keep`` promotes to stage 3 only
the candidates whose stage-2 score is among the best that fraction so far.
``evaluate_validation`` scores the validation games (variants of the same
families, apart from both sets) with ``validation_iterations``: the run
returns the program that does best there among its best on the training
set. ``evaluate_held_out`` scores the held-out games with
``held_out_iterations`` (never used for selection), and ``held_out_baselines()``
gives the built-in algorithms of ``societas.marl.games`` as programs of the same form,
so a report can rank them on the same footing.

Settings (defaults: the paper's 1000 iterations, 100 for stage 1) come, later
overriding earlier, from ``settings.json`` next to this file and from
``task_settings.json`` next to the program (written by the engine from the
run's ``evaluator.task_settings``): keys ``iterations``,
``stage1_iterations``, ``held_out_iterations`` (default: ``iterations``),
``validation_iterations`` (default: ``held_out_iterations``),
``halving_iterations`` (default: ``iterations // 5``).
"""

import importlib.util
import inspect
import math
import re

from societas.evolve.task_settings import load_task_settings
from societas.marl.games.suites import HELD_OUT_GAMES, VALIDATION_GAMES
from societas.marl.games.suites import TRAINING_GAMES as TRAIN_GAMES

DEFAULTS = {
    "iterations": 1000,
    "stage1_iterations": 100,
    "held_out_iterations": None,
    "validation_iterations": None,
    "halving_iterations": None,
}

# The built-in baselines as candidate programs. Horizon-dependent constants follow
# the planned number of iterations T: HS-PCFR+ schedules gamma over T, and VAD-CFR
# starts averaging after T/2 iterations (the published 500 of 1000).
_BASELINE_SOURCE = """from societas.marl.games.algorithms import {factory}


def build_algorithm(iterations):
    return {factory}({arguments})
"""
BASELINES = {
    "cfr": ("CFR", ""),
    "cfr+": ("CFRPlus", ""),
    "lcfr": ("LCFR", ""),
    "dcfr": ("DCFR", ""),
    "pcfr+": ("PCFRPlus", ""),
    "dpcfr+": ("DPCFRPlus", ""),
    "hs-pcfr+": ("HSPCFRPlus", "total_iterations=iterations"),
    "vad-cfr": ("VADCFR", "warmup_iterations=iterations // 2"),
}


def settings(program_path=None):
    """The effective settings for an evaluation of ``program_path``."""
    values = load_task_settings(__file__, program_path, DEFAULTS, "cfr", ("iterations", "stage1_iterations"))
    halving = values.get("halving_iterations")
    if halving is None:
        halving = max(1, values["iterations"] // 5)
    if isinstance(halving, bool) or not isinstance(halving, int) or not 1 <= halving <= values["iterations"]:
        raise ValueError(
            f"cfr task setting halving_iterations must be a whole number from 1 to iterations "
            f"({values['iterations']}), got {halving!r}"
        )
    values["halving_iterations"] = halving
    return values


def metric_name(game):
    return "neg_expl_" + re.sub(r"\W+", "_", game).strip("_")


def load_builder(program_path, iterations):
    """A function returning a fresh ``Algorithm`` of the program at ``program_path``."""
    from societas.marl.games import Algorithm

    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = getattr(module, "build_algorithm", None)
    if not callable(build):
        raise TypeError("the program defines no build_algorithm() function")
    takes_horizon = len(inspect.signature(build).parameters) >= 1

    def fresh():
        algorithm = build(iterations) if takes_horizon else build()
        if not isinstance(algorithm, Algorithm):
            raise TypeError(
                f"build_algorithm() returned {type(algorithm).__name__}, expected societas.marl.games.Algorithm"
            )
        return algorithm

    return fresh


def check_average_policy(policy, game):
    """The exploitability of anything but a probability distribution per information set means nothing."""
    import torch

    if not bool(torch.isfinite(policy).all()):
        raise ValueError(f"the average policy on {game} has non-finite entries")
    lowest = float(policy.min())
    if lowest < -1e-9:
        raise ValueError(
            f"the average policy on {game} is not a distribution: it has a negative "
            f"probability ({lowest:.3g}): the policies or the averaging weights went negative"
        )


_TREES: dict = {}


def game_tree(game):
    """The game's tree, built once per process (a group's candidates share the harness's copy)."""
    from societas.marl.games import load_game

    if game not in _TREES:
        # No disk cache: the sandbox cannot see the host's, and a large tree
        # (3-player Leduc) would exceed the sandbox's file-size limit.
        _TREES[game] = load_game(game, "cpu", cache=False)
    return _TREES[game]


def warm_up(stages):
    """Called once by a group of evaluations before its candidates run: torch and the stages' games."""
    import torch

    torch.set_num_threads(1)
    games = {
        "evaluate_stage1": TRAIN_GAMES[:1],
        "evaluate": TRAIN_GAMES,
        "evaluate_stage2": TRAIN_GAMES,
        "evaluate_stage3": TRAIN_GAMES,
        "evaluate_validation": VALIDATION_GAMES,
        "evaluate_held_out": HELD_OUT_GAMES,
    }
    for stage in stages:
        for game in games.get(stage, ()):
            game_tree(game)


def start(program_path, games, iterations):
    """One solver per game for the program's algorithm planned over ``iterations``, none run yet."""
    import torch

    from societas.marl.games import CFRSolver

    torch.set_num_threads(1)
    fresh = load_builder(program_path, iterations)
    # A fresh Algorithm per game: hooks may keep state between iterations.
    return {game: CFRSolver(game_tree(game), fresh(), device="cpu") for game in games}


def advance(solvers, until):
    """Run every solver up to iteration ``until``; the metrics of their average policies there."""
    metrics = {}
    for game, solver in solvers.items():
        result = solver.run(until - solver.iteration)
        check_average_policy(solver.average_policy(), game)
        exploitability = float(result.exploitability[0])
        if not math.isfinite(exploitability):
            raise ValueError(f"exploitability on {game} is {exploitability}")
        metrics[metric_name(game)] = -exploitability
    metrics["combined_score"] = sum(metrics.values()) / len(solvers)
    return metrics


def score(program_path, games, iterations):
    return advance(start(program_path, games, iterations), iterations)


# Stage 2's solvers, continued by stage 3 in the same process.
_STARTED: dict = {}


def evaluate_stage1(program_path):
    return score(program_path, TRAIN_GAMES[:1], settings(program_path)["stage1_iterations"])


def evaluate(program_path):
    return score(program_path, TRAIN_GAMES, settings(program_path)["iterations"])


def evaluate_stage2(program_path):
    values = settings(program_path)
    solvers = start(program_path, TRAIN_GAMES, values["iterations"])
    _STARTED[program_path] = solvers
    return advance(solvers, values["halving_iterations"])


def evaluate_stage3(program_path):
    values = settings(program_path)
    solvers = _STARTED.pop(program_path, None)
    if solvers is None:  # stage 3 on its own: the whole run
        solvers = start(program_path, TRAIN_GAMES, values["iterations"])
    return advance(solvers, values["iterations"])


def evaluate_validation(program_path):
    return score(program_path, VALIDATION_GAMES, settings(program_path)["validation_iterations"])


def evaluate_held_out(program_path):
    return score(program_path, HELD_OUT_GAMES, settings(program_path)["held_out_iterations"])


def held_out_baselines():
    """``{name: program source}`` for every built-in CFR variant, scored like a candidate."""
    return {
        name: _BASELINE_SOURCE.format(factory=factory, arguments=arguments)
        for name, (factory, arguments) in BASELINES.items()
    }
