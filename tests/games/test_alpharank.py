"""α-Rank as a PSRO meta-solver, against OpenSpiel's ``alpharank`` on the same payoff tables."""

from __future__ import annotations

import numpy as np
import pytest
from open_spiel.python.algorithms.psro_v2 import utils as os_psro_utils
from open_spiel.python.egt import alpharank as os_alpharank

from societas.marl.games import load_game, run_psro
from societas.marl.games.alpharank import MAX_PROFILES, alpharank_marginals, sweep_pi_vs_epsilon
from societas.marl.games.metasolvers import get_meta_solver, meta_solver_names


def _reference(tables):
    joint = os_psro_utils.remove_epsilon_negative_probs(os_alpharank.sweep_pi_vs_epsilon(tables))
    return joint, os_psro_utils.get_alpharank_marginals(tables, joint)


@pytest.mark.parametrize("shape", [(3, 3), (4, 5), (3, 3, 3), (2, 3, 4), (6, 6)])
@pytest.mark.parametrize("seed", [0, 1])
def test_joint_and_marginals_match_openspiel(shape, seed):
    rng = np.random.default_rng(seed)
    tables = [rng.standard_normal(shape) for _ in shape]
    joint, marginals = _reference(tables)
    np.testing.assert_allclose(sweep_pi_vs_epsilon(tables), joint, atol=1e-12)
    for ours, ref in zip(alpharank_marginals(tables), marginals):
        np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_integer_payoffs_with_ties_match_openspiel():
    rng = np.random.default_rng(5)
    tables = [rng.integers(-2, 3, (4, 4)).astype(float) for _ in range(2)]
    np.testing.assert_allclose(sweep_pi_vs_epsilon(tables), _reference(tables)[0], atol=1e-12)


def test_prisoners_dilemma_ranks_mutual_defection_first():
    # (C, D) x (C, D): defecting strictly dominates, so the chain sinks into (D, D).
    row = np.array([[3.0, 0.0], [5.0, 1.0]])
    marginals = alpharank_marginals([row, row.T])
    assert marginals[0][1] > 0.999 and marginals[1][1] > 0.999
    solver = get_meta_solver("alpharank")
    assert "alpharank" in meta_solver_names()
    for got, want in zip(solver.get_meta_strategy([row, row.T]), marginals):
        np.testing.assert_allclose(got, want)


def test_one_profile_and_too_many_profiles():
    assert sweep_pi_vs_epsilon([np.ones((1, 1)), np.ones((1, 1))]).tolist() == [1.0]
    n = int(np.sqrt(MAX_PROFILES)) + 1
    with pytest.raises(ValueError, match=f"has {n * n} joint profiles"):
        sweep_pi_vs_epsilon([np.zeros((n, n)), np.zeros((n, n))])


def test_psro_with_alpharank_answers_openspiels_meta_strategy():
    res = run_psro(load_game("kuhn_poker", "cpu"), 4, "alpharank")
    assert res.train_solver == "alpharank"
    _, marginals = _reference([np.asarray(m) for m in res.meta_games])
    for ours, ref in zip(res.meta_strategies[-1], marginals):
        np.testing.assert_allclose(ours, ref, atol=1e-12)
    assert res.exploitability[-1] < res.exploitability[0]
