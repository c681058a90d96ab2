"""Evaluator of the PSRO discovery task (arXiv 2602.16928), OpenEvolve interface.

The candidate's ``build_meta_solvers()`` returns ``(training, evaluation)``
meta-solvers, objects with ``get_meta_strategy(meta_games, **context)`` as in
``societas.marl.games.metasolvers``. ``societas.marl.games.run_psro`` runs ``iterations`` PSRO
iterations (exact best responses, exact meta-game payoffs) on each training
game with them; the metrics are the per-game negative exploitability of the
final evaluation meta-strategy and their mean as ``combined_score`` (higher is
better). ``evaluate_stage1`` is the cheap filter: ``stage1_iterations`` on
3-player Kuhn poker. ``evaluate_held_out`` scores the held-out games with
``held_out_iterations``; ``held_out_baselines()`` gives the built-in
meta-solvers as programs of the same form: uniform, PRD, RM and SHOR-PSRO.
``nash`` is not among them: it solves a linear program, which gives Nash
equilibria of two-player zero-sum meta-games only, and the held-out games
include 3- and 4-player poker, whose meta-games have no such program (with
three or more players an equilibrium can be irrational, and finding one is
PPAD-hard).

Every meta-strategy a candidate returns is checked: one vector per player, of
its population's size, finite, non-negative and summing to 1 (within 1e-6);
anything else fails the candidate with a message saying which.

Settings (defaults: the paper's 100 iterations, 10 for stage 1, PSRO seed 0)
come, later overriding earlier, from ``settings.json`` next to this file and
``task_settings.json`` next to the program (the run's
``evaluator.task_settings``): ``iterations``, ``stage1_iterations``,
``held_out_iterations`` (default: ``iterations``), ``seed``. The meta-game
has ``(iterations + 1)^players`` entries, each filled by a contraction over
terminal histories (``societas.marl.games.psro.MetaGame``): 100 iterations on the four
training games take about 7 s on one core; on the held-out games about 4
minutes, most of it 3-player Leduc poker (2 minutes) and 4-player Kuhn poker
(whose meta-game holds 4 x 101^4 payoffs, 3.3 GB).
"""

import importlib.util
import math
import re

import numpy as np

from societas.evolve.task_settings import load_task_settings
from societas.marl.games.suites import HELD_OUT_GAMES
from societas.marl.games.suites import TRAINING_GAMES as TRAIN_GAMES

DEFAULTS = {"iterations": 100, "stage1_iterations": 10, "held_out_iterations": None, "seed": 0}

_BASELINE_SOURCE = """from societas.marl.games.metasolvers import get_meta_solver


def build_meta_solvers():
    return get_meta_solver({train!r}), get_meta_solver({evaluation!r})
"""
# (training, evaluation) meta-solvers of societas.marl.games; "nash" is left out: it solves two-player games only.
BASELINES = {
    "uniform": ("uniform", "uniform"),
    "prd": ("prd", "prd"),
    "rm": ("rm", "rm"),
    "shor-psro": ("shor-train", "shor-eval"),
}


def settings(program_path=None):
    """The effective settings for an evaluation of ``program_path``."""
    values = load_task_settings(__file__, program_path, DEFAULTS, "psro", ("iterations", "stage1_iterations"))
    values["seed"] = int(values["seed"])
    return values


def metric_name(game):
    return "neg_expl_" + re.sub(r"\W+", "_", game).strip("_")


class CheckedMetaSolver:
    """A candidate's meta-solver whose every answer is checked before PSRO uses it."""

    stateless = False

    def __init__(self, solver, role):
        if not callable(getattr(solver, "get_meta_strategy", None)):
            raise TypeError(f"the {role} meta-solver {solver!r} has no get_meta_strategy method")
        self.solver = solver
        self.role = role
        self.name = f"{role}:{type(solver).__name__}"

    def get_meta_strategy(self, meta_games, **context):
        answer = self.solver.get_meta_strategy(meta_games, **context)
        sizes = np.shape(meta_games[0])
        where = f"the {self.role} meta-solver (population sizes {list(sizes)})"
        try:
            answer = list(answer)
        except TypeError:
            raise TypeError(
                f"{where} returned {type(answer).__name__}, expected one vector per player"
            ) from None
        if len(answer) != len(sizes):
            raise ValueError(f"{where} returned {len(answer)} vectors for {len(sizes)} players")
        checked = []
        for player, (vector, size) in enumerate(zip(answer, sizes)):
            vector = np.asarray(vector, dtype=np.float64).reshape(-1)
            if vector.shape != (size,):
                raise ValueError(f"{where}: player {player}'s vector has {vector.size} entries, not {size}")
            if not np.all(np.isfinite(vector)):
                raise ValueError(f"{where}: player {player}'s vector is not finite: {vector}")
            if (vector < 0).any():
                raise ValueError(f"{where}: player {player}'s vector has negative entries: {vector}")
            if abs(vector.sum() - 1.0) > 1e-6:
                raise ValueError(f"{where}: player {player}'s vector sums to {vector.sum()!r}, not 1")
            checked.append(vector)
        return checked


def load_meta_solvers(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = getattr(module, "build_meta_solvers", None)
    if not callable(build):
        raise TypeError("the program defines no build_meta_solvers() function")

    def fresh():
        solvers = build()
        if not isinstance(solvers, (tuple, list)) or len(solvers) != 2:
            raise TypeError("build_meta_solvers() must return (training meta-solver, evaluation meta-solver)")
        return CheckedMetaSolver(solvers[0], "training"), CheckedMetaSolver(solvers[1], "evaluation")

    return fresh


_TREES: dict = {}


def game_tree(game):
    """The game's tree, built once per process (a group's candidates share the harness's copy:
    3-player Leduc poker takes about 12 s to build on one core, its 2 held-out PSRO iterations 1.4 s)."""
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
    games = {"evaluate_stage1": TRAIN_GAMES[:1], "evaluate": TRAIN_GAMES, "evaluate_held_out": HELD_OUT_GAMES}
    for stage in stages:
        for game in games.get(stage, ()):
            game_tree(game)


def score(program_path, games, iterations, seed):
    import torch

    from societas.marl.games.psro import run_psro

    torch.set_num_threads(1)
    fresh = load_meta_solvers(program_path)
    metrics = {}
    for game in games:
        tree = game_tree(game)
        # Fresh solvers per game: a solver may keep state between calls (SHOR anneals).
        train, evaluation = fresh()
        result = run_psro(tree, iterations, train, evaluation, device="cpu", seed=seed)
        exploitability = float(result.exploitability[-1])
        if not math.isfinite(exploitability):
            raise ValueError(f"exploitability on {game} is {exploitability}")
        metrics[metric_name(game)] = -exploitability
    metrics["combined_score"] = sum(metrics.values()) / len(games)
    return metrics


def evaluate_stage1(program_path):
    values = settings(program_path)
    return score(program_path, TRAIN_GAMES[:1], values["stage1_iterations"], values["seed"])


def evaluate(program_path):
    values = settings(program_path)
    return score(program_path, TRAIN_GAMES, values["iterations"], values["seed"])


def evaluate_held_out(program_path):
    values = settings(program_path)
    return score(program_path, HELD_OUT_GAMES, values["held_out_iterations"], values["seed"])


def held_out_baselines():
    """``{name: program source}`` for the built-in meta-solvers, scored like a candidate."""
    return {
        name: _BASELINE_SOURCE.format(train=train, evaluation=evaluation)
        for name, (train, evaluation) in BASELINES.items()
    }
