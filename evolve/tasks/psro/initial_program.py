"""Seed for the PSRO discovery task (Li, Schultz, Hennes & Lanctot, arXiv 2602.16928).

The evolvable part is PSRO's two meta-strategy solvers (``societas.marl.games.psro``):
the *training* solver, whose meta-strategy the best responses answer, and the
*evaluation* solver, whose meta-strategy is the policy that is scored. Both
follow the interface of ``societas.marl.games.metasolvers``::

    get_meta_strategy(meta_games, **context) -> list[np.ndarray]

``meta_games[p]`` is player ``p``'s payoff tensor ``(n_0, ..., n_{N-1})`` over
the joint profiles of population members; ``context`` holds ``iteration`` and
``populations``. The answer is one probability vector per player.

Both seeds are uniform over each population, as in the paper (PSRO with a
uniform meta-solver is fictitious play). They are written as a softmax of each
member's mean payoff against the others' populations with inverse temperature
``0.0``, which is exactly uniform, so that perturbing that constant turns them
into payoff-sensitive solvers.
"""

import numpy as np


# EVOLVE-BLOCK-START
def mean_payoffs(meta_games, player):
    """Each of ``player``'s members' payoff averaged over the other players' populations."""
    payoffs = np.asarray(meta_games[player], dtype=np.float64)
    others = tuple(q for q in range(payoffs.ndim) if q != player)
    return payoffs.mean(axis=others) if others else payoffs


class TrainMetaSolver:
    """Training meta-strategy: softmax(0.0 * mean payoff), i.e. uniform."""

    def get_meta_strategy(self, meta_games, **context):
        strategies = []
        for player in range(len(meta_games)):
            u = mean_payoffs(meta_games, player)
            weights = np.exp(0.0 * (u - u.max()))
            strategies.append(weights / weights.sum())
        return strategies


class EvalMetaSolver:
    """Evaluation meta-strategy: softmax(0.0 * mean payoff), i.e. uniform."""

    def get_meta_strategy(self, meta_games, **context):
        strategies = []
        for player in range(len(meta_games)):
            u = mean_payoffs(meta_games, player)
            weights = np.exp(0.0 * (u - u.max()))
            strategies.append(weights / weights.sum())
        return strategies


# EVOLVE-BLOCK-END


def build_meta_solvers():
    """The evaluator calls this: (training meta-solver, evaluation meta-solver)."""
    return TrainMetaSolver(), EvalMetaSolver()
