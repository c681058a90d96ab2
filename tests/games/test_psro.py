"""PSRO and its meta-solvers against independent references: OpenSpiel's own
PRD / regret matching / policy aggregator / expected_game_score /
exploitability, a support-enumeration Nash solver written here, and a literal
transcription of SHOR-PSRO's listing (arXiv 2602.16928, Listing 6)."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pyspiel
import pytest
import torch
from open_spiel.python.algorithms import (
    expected_game_score,
    policy_aggregator,
)
from open_spiel.python.algorithms import exploitability as os_exploitability
from open_spiel.python.algorithms import projected_replicator_dynamics as os_prd
from open_spiel.python.algorithms import regret_matching as os_rm

from societas.marl.games import load_game
from societas.marl.games import metasolvers as ms
from societas.marl.games.psro import (
    MetaGame,
    infoset_own_reach,
    joint_policy,
    mixture_behaviour_policy,
    mixture_player_policy,
    run_psro,
)

# ------------------------------------------------------------ references --


def _support_enumeration_value(a: np.ndarray) -> float:
    """Value of the zero-sum game ``a`` (row maximises) by enumerating equal-size
    supports and solving the indifference equations (Shapley–Snow)."""
    m, n = a.shape
    best = None
    for k in range(1, min(m, n) + 1):
        for rows in itertools.combinations(range(m), k):
            for cols in itertools.combinations(range(n), k):
                sub = a[np.ix_(rows, cols)]
                # x^T sub = v 1, sum x = 1   and   sub y = v 1, sum y = 1
                mx = np.zeros((k + 1, k + 1))
                mx[:k, :k] = sub.T
                mx[:k, k] = -1
                mx[k, :k] = 1
                my = np.zeros((k + 1, k + 1))
                my[:k, :k] = sub
                my[:k, k] = -1
                my[k, :k] = 1
                rhs = np.zeros(k + 1)
                rhs[k] = 1
                try:
                    sx = np.linalg.solve(mx, rhs)
                    sy = np.linalg.solve(my, rhs)
                except np.linalg.LinAlgError:
                    continue
                x = np.zeros(m)
                y = np.zeros(n)
                x[list(rows)] = sx[:k]
                y[list(cols)] = sy[:k]
                if (x < -1e-12).any() or (y < -1e-12).any():
                    continue
                v = x @ a @ y
                if (x @ a >= v - 1e-9).all() and (a @ y <= v + 1e-9).all():
                    best = v
                    return best
    raise AssertionError("no equilibrium found")


def _paper_hybrid_orm_solver(
    meta_games,
    iterations,
    blending_factor=0.0,
    temperature=0.1,
    momentum_beta=0.0,
    gain_normalization=True,
    diversity_bonus_coeff=0.0,
    return_average_strategy=True,
):
    """``_hybrid_orm_solver`` of arXiv 2602.16928 Listing 6, statement by statement."""

    def smoothed(payoff_vec, temperature):
        stable_payoffs = payoff_vec - np.max(payoff_vec)
        exp_payoffs = np.exp(stable_payoffs / temperature)
        s = np.sum(exp_payoffs)
        if s > 1e-12:
            return exp_payoffs / s
        return np.ones_like(payoff_vec) / len(payoff_vec)

    num_players = len(meta_games)
    num_strats = [m.shape[i] for i, m in enumerate(meta_games)]
    strategies = [np.ones(s, dtype=float) / s for s in num_strats]
    cum_regrets = [np.zeros(s, dtype=float) for s in num_strats]
    avg_strategies = [np.zeros(s, dtype=float) for s in num_strats]
    prev = [np.zeros(s, dtype=float) for s in num_strats]
    for _ in range(iterations):
        current = [np.zeros(s, dtype=float) for s in num_strats]
        orm = [np.zeros(s, dtype=float) for s in num_strats]
        for p in range(num_players):
            payoff_vec = meta_games[p]
            for other_p in reversed(range(num_players)):
                if other_p != p:
                    payoff_vec = np.tensordot(payoff_vec, strategies[other_p], axes=([other_p], [0]))
            centered = payoff_vec - np.mean(payoff_vec)
            current[p] = centered
            optimistic = (1 + momentum_beta) * centered - momentum_beta * prev[p]
            diversity_bonus = diversity_bonus_coeff * (1.0 - strategies[p])
            gains = optimistic + diversity_bonus
            if gain_normalization:
                mx = np.max(np.abs(gains))
                if mx > 1e-8:
                    gains /= mx
            cum_regrets[p] += gains
            cum_regrets[p] = np.maximum(0, cum_regrets[p])
            tot = cum_regrets[p].sum()
            if tot > 1e-12:
                orm[p] = cum_regrets[p] / tot
            else:
                orm[p] = np.ones(num_strats[p]) / num_strats[p]
            sbp = smoothed(payoff_vec, temperature)
            strategies[p] = (1 - blending_factor) * orm[p] + blending_factor * sbp
            prev[p] = current[p]
            if return_average_strategy:
                avg_strategies[p] += strategies[p]
    if return_average_strategy:
        return [a / a.sum() for a in avg_strategies]
    return strategies


def _random_games(shape, seed, zero_sum=False):
    rng = np.random.default_rng(seed)
    if zero_sum:
        a = rng.normal(size=shape)
        return [a, -a]
    return [rng.normal(size=shape) for _ in shape]


def _assert_distributions(strats, sizes):
    assert len(strats) == len(sizes)
    for s, n in zip(strats, sizes):
        s = np.asarray(s)
        assert s.shape == (n,)
        assert np.all(s >= 0) and abs(s.sum() - 1) < 1e-9


# ------------------------------------------------------------------- Nash --


def test_nash_rock_paper_scissors():
    a = np.array([[0.0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    (x, y), (v0, v1) = ms.zero_sum_nash([a, -a])
    np.testing.assert_allclose(x, np.full(3, 1 / 3), atol=1e-9)
    np.testing.assert_allclose(y, np.full(3, 1 / 3), atol=1e-9)
    assert abs(v0) < 1e-9 and abs(v1) < 1e-9
    # biased RPS (rock beating scissors pays 2): indifference gives x1 = 2 x2,
    # x2 = x0, x1 = 2 x0, i.e. the unique equilibrium (1/4, 1/2, 1/4)
    b = np.array([[0.0, -1, 2], [1, 0, -1], [-2, 1, 0]])
    x, y = ms.NashSolver().get_meta_strategy([b, -b])
    np.testing.assert_allclose(x, [1 / 4, 1 / 2, 1 / 4], atol=1e-8)
    np.testing.assert_allclose(y, [1 / 4, 1 / 2, 1 / 4], atol=1e-8)


@pytest.mark.parametrize("seed,shape", [(0, (5, 7)), (1, (6, 4)), (2, (6, 6))])
def test_nash_random_zero_sum_matches_support_enumeration(seed, shape):
    a = np.random.default_rng(seed).normal(size=shape)
    (x, y), (v0, v1) = ms.zero_sum_nash([a + 3.0, 3.0 - a])  # constant-sum is fine
    value = x @ a @ y
    ref = _support_enumeration_value(a)
    assert abs(value - ref) < 1e-7
    assert abs(v0 - 3.0 - ref) < 1e-7 and abs(v1 - 3.0 + ref) < 1e-7
    # no pure deviation improves either player
    assert (a @ y).max() <= value + 1e-8
    assert (x @ a).min() >= value - 1e-8
    _assert_distributions([x, y], shape)


def test_nash_refuses_other_games():
    with pytest.raises(ValueError, match="two-player"):
        ms.NashSolver().get_meta_strategy(_random_games((2, 2, 2), 0))
    with pytest.raises(ValueError, match="zero-sum"):
        ms.NashSolver().get_meta_strategy(_random_games((3, 3), 0))


# ------------------------------------------------------------ PRD and RM --


def test_prd_rm_defaults_match_openspiel():
    sig = inspect.signature(os_prd.projected_replicator_dynamics).parameters
    s = ms.PRDSolver()
    assert s.iterations == sig["prd_iterations"].default
    assert s.dt == sig["prd_dt"].default and s.gamma == sig["prd_gamma"].default
    assert s.average_over_last_n_strategies == sig["average_over_last_n_strategies"].default
    sig = inspect.signature(os_rm.regret_matching).parameters
    r = ms.RMSolver()
    assert r.iterations == sig["iterations"].default and r.gamma == sig["gamma"].default


@pytest.mark.parametrize(
    "shape,window", [((6, 6), None), ((5, 7), None), ((6, 6), 100), ((3, 3, 3), None), ((3, 4, 2), 50)]
)
def test_prd_matches_openspiel(shape, window):
    games = _random_games(shape, seed=len(shape) * 10 + shape[0])
    ref = os_prd.projected_replicator_dynamics(
        games, prd_iterations=1500, prd_dt=0.05, average_over_last_n_strategies=window
    )
    got = ms.PRDSolver(iterations=1500, dt=0.05, average_over_last_n_strategies=window).get_meta_strategy(
        games
    )
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, atol=1e-10)
    # the dynamics actually moved away from uniform (the comparison is not vacuous)
    assert max(np.abs(g - 1 / len(g)).max() for g in got) > 0.05


@pytest.mark.parametrize(
    "shape,window", [((6, 6), None), ((5, 7), None), ((6, 6), 100), ((3, 3, 3), None), ((3, 4, 2), 50)]
)
def test_rm_matches_openspiel(shape, window):
    games = _random_games(shape, seed=len(shape) * 10 + shape[0] + 1)
    ref = os_rm.regret_matching(games, iterations=1500, gamma=1e-3, average_over_last_n_strategies=window)
    got = ms.RMSolver(iterations=1500, gamma=1e-3, average_over_last_n_strategies=window).get_meta_strategy(
        games
    )
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, atol=1e-10)
    assert max(np.abs(g - 1 / len(g)).max() for g in got) > 0.05


# ------------------------------------------------------------------- SHOR --


@pytest.mark.parametrize("shape", [(4, 5), (3, 3, 4)])
@pytest.mark.parametrize(
    "kw",
    [
        {
            "blending_factor": 0.3,
            "temperature": 0.5,
            "momentum_beta": 0.5,
            "diversity_bonus_coeff": 0.05,
            "return_average_strategy": True,
        },
        {
            "blending_factor": 0.01,
            "temperature": 0.001,
            "momentum_beta": 0.2,
            "diversity_bonus_coeff": 0.0,
            "return_average_strategy": False,
        },
    ],
)
def test_hybrid_orm_matches_paper_listing(shape, kw):
    games = _random_games(shape, seed=sum(shape))
    ref = _paper_hybrid_orm_solver(games, 300, **kw)
    got = ms.hybrid_orm_solver(games, 300, **kw)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, atol=1e-12)


def test_shor_train_schedule_anneals():
    s = ms.SHORTrainSolver()
    first, mid, end, late = s.schedule(1), s.schedule(37), s.schedule(75), s.schedule(100)
    assert first["blending_factor"] == pytest.approx(0.3 * 74 / 75 + 0.05 / 75)
    assert first["temperature"] == pytest.approx(0.5 * 74 / 75 + 0.01 / 75)
    assert first["diversity_bonus_coeff"] == pytest.approx(0.05 * 74 / 75 + 0.001 / 75)
    for key, final in [("blending_factor", 0.05), ("temperature", 0.01), ("diversity_bonus_coeff", 0.001)]:
        assert first[key] > mid[key] > end[key]
        assert end[key] == pytest.approx(final) and late[key] == pytest.approx(final)
    assert [s.solver_iterations(n) for n in (1, 31, 1000)] == [1000, 1600, 5000]
    e = ms.SHOREvalSolver()
    assert [e.solver_iterations(n) for n in (1, 31, 1000)] == [8000, 9500, 15000]
    assert (e.blending_factor, e.temperature, e.momentum_beta, e.diversity_bonus_coeff) == (
        0.01,
        0.001,
        0.2,
        0.0,
    )
    # each call advances the schedule and runs the listed solver
    games = _random_games((3, 3), seed=3, zero_sum=True)
    outs = [s.get_meta_strategy(games) for _ in range(2)]
    assert s.calls == 2 and s.last_params["k"] == 2 and s.last_params["iterations"] == 1040
    p2 = s.schedule(2)
    ref = _paper_hybrid_orm_solver(games, 1040, momentum_beta=0.5, **p2)
    for r, g in zip(ref, outs[1]):
        np.testing.assert_allclose(g, r, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (4, 4, 4)])
def test_shor_solvers_return_distributions(shape):
    games = _random_games(shape, seed=7)
    _assert_distributions(ms.SHORTrainSolver().get_meta_strategy(games), shape)
    _assert_distributions(ms.get_meta_solver("shor-eval").get_meta_strategy(games), shape)


def test_registry():
    assert set(ms.meta_solver_names()) >= {"uniform", "nash", "prd", "rm", "shor-train", "shor-eval"}
    with pytest.raises(ValueError, match="unknown meta-solver"):
        ms.get_meta_solver("nope")
    _assert_distributions(ms.get_meta_solver("uniform").get_meta_strategy(_random_games((2, 3), 0)), (2, 3))


# --------------------------------------------------------------- mixtures --


def _os_value(game, tree, pol):
    tab = tree.to_tabular_policy(pol, game)
    return np.asarray(expected_game_score.policy_value(game.new_initial_state(), [tab] * game.num_players()))


@pytest.fixture(scope="module")
def kuhn():
    return load_game("kuhn_poker", "cpu"), pyspiel.load_game("kuhn_poker")


def test_own_reach_from_sequences(kuhn):
    tree, _ = kuhn
    sl = tree.infoset_slices[0]
    pol = tree.random_policy(2, seed=3)[:, sl]
    x = infoset_own_reach(tree, 0, pol)
    # kuhn player 0: first-move infosets are reached with prob 1, the
    # "pass, bet" infosets with the probability of passing at the first move
    for i, key in enumerate(tree.infoset_keys[sl]):
        if key.endswith("pb"):
            first = tree.infoset_keys[sl].index(key[:-2])
            pass_slot = list(tree.arrays.actions[sl.start + first]).index(0)
            torch.testing.assert_close(x[:, i], pol[:, first, pass_slot])
        else:
            torch.testing.assert_close(x[:, i], torch.ones(2, dtype=x.dtype))


def test_mixture_is_realisation_equivalent(kuhn):
    tree, game = kuhn
    s0, s1 = tree.infoset_slices
    members = tree.random_policy(3, seed=11)[:, s0]
    w = np.array([0.5, 0.3, 0.2])
    opp = tree.random_policy(1, seed=5)[0, s1]
    mix = mixture_player_policy(tree, 0, members, w)
    v_mix = _os_value(game, tree, joint_policy(tree, [mix, opp]))
    v_members = sum(wk * _os_value(game, tree, joint_policy(tree, [m, opp])) for wk, m in zip(w, members))
    np.testing.assert_allclose(v_mix, v_members, atol=1e-12)
    # the naive average of action probabilities is not equivalent here
    naive = (torch.as_tensor(w)[:, None, None] * members).sum(0)
    v_naive = _os_value(game, tree, joint_policy(tree, [naive, opp]))
    assert np.abs(v_naive - v_members).max() > 1e-3
    # and the mixture is OpenSpiel's PolicyAggregator's answer
    tabs = [tree.to_tabular_policy(joint_policy(tree, [m, opp]), game) for m in members]
    agg = policy_aggregator.PolicyAggregator(game).aggregate([0], [tabs, tabs[:1]], [list(w), [1.0]])
    for i, key in enumerate(tree.infoset_keys[s0]):
        n = int(tree.arrays.num_actions[s0.start + i])
        acts = tree.arrays.actions[s0.start + i, :n]
        probs = agg._policies[0][key]
        np.testing.assert_allclose([probs[a] for a in acts], mix[i, :n].numpy(), atol=1e-12)


def test_three_player_mixture_value_is_meta_game_expectation():
    tree = load_game("kuhn_poker(players=3)", "cpu")
    game = pyspiel.load_game("kuhn_poker(players=3)")
    pops = [tree.random_policy(3, seed=20 + p)[:, tree.infoset_slices[p]] for p in range(3)]
    mg = MetaGame(tree, pops)
    weights = [np.array([0.6, 0.4, 0.0]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])]
    expect = np.einsum("pijk,i,j,k->p", mg.payoffs, *weights)
    mix = mixture_behaviour_policy(tree, mg.populations, weights)
    np.testing.assert_allclose(_os_value(game, tree, mix), expect, atol=1e-12)


def test_meta_game_payoffs_match_openspiel(kuhn):
    tree, game = kuhn
    res = run_psro(tree, 4, "uniform")
    mg = res.meta_games
    assert mg[0].shape == (5, 5) and len(res.populations) == 2
    for i, j in itertools.product(range(5), range(5)):
        pol = joint_policy(tree, [res.populations[0][i], res.populations[1][j]])
        np.testing.assert_allclose(_os_value(game, tree, pol), [mg[0][i, j], mg[1][i, j]], atol=1e-12)
    # incremental extension equals a from-scratch computation
    fresh = MetaGame(tree, res.populations)
    np.testing.assert_allclose(np.stack(mg), fresh.payoffs, atol=1e-14)
    # three players: a few profiles of a grown meta-game
    tree3 = load_game("kuhn_poker(players=3)", "cpu")
    game3 = pyspiel.load_game("kuhn_poker(players=3)")
    res3 = run_psro(tree3, 2, "uniform")
    assert res3.meta_games[0].shape == (3, 3, 3)
    for prof in [(0, 0, 0), (2, 1, 0), (1, 2, 2), (2, 2, 2), (0, 2, 1)]:
        pol = joint_policy(tree3, [res3.populations[p][k] for p, k in enumerate(prof)])
        np.testing.assert_allclose(
            _os_value(game3, tree3, pol), [res3.meta_games[p][prof] for p in range(3)], atol=1e-12
        )


@pytest.mark.parametrize(
    "game",
    [
        "leduc_poker",
        "kuhn_poker(players=3)",
        "goofspiel(num_cards=3,imp_info=True,points_order=descending)",
        "liars_dice(dice_sides=3)",
    ],
)
def test_factorised_meta_game_equals_tree_evaluation(game):
    """The contraction over terminal own reaches equals evaluating each joint
    profile on the tree (``policy_value``), for random populations grown in
    uneven steps (one player gaining no member in a step) and with a pure
    member, whose support restricts the contraction."""
    from societas.marl.games.evaluate import policy_value

    tree = load_game(game, "cpu")
    N = tree.num_players
    pops = [tree.random_policy(2, seed=7 + p)[:, tree.infoset_slices[p]] for p in range(N)]
    mg = MetaGame(tree, pops)
    extra = tree.random_policy(2, seed=99)
    mg.add([extra[0, tree.infoset_slices[p]] for p in range(N)])
    # a pure member (as a best response is): its zero reach prunes terminals
    probs = extra[1, tree.infoset_slices[0]]
    pure = torch.zeros_like(probs).scatter_(1, probs.argmax(1, keepdim=True), 1.0)
    mg.add([pure] + [None] * (N - 1))
    assert mg.sizes == [4] + [3] * (N - 1)
    grid = list(itertools.product(*[range(n) for n in mg.sizes]))
    pol = torch.cat([mg.profile_policy(k) for k in grid], 0)
    ref = policy_value(tree, pol).numpy()
    got = np.stack([mg.payoffs[(slice(None),) + k] for k in grid])
    np.testing.assert_allclose(got, ref, atol=1e-12)
    assert mg.profiles_evaluated == len(grid)


# ------------------------------------------------------------------- PSRO --


def test_psro_nash_solves_kuhn(kuhn):
    tree, game = kuhn
    res = run_psro(tree, 20, "nash")
    ex = res.exploitability
    assert len(ex) == 21 and res.population_sizes[-1] == [21, 21]
    assert ex[0] == pytest.approx(0.4583333333, abs=1e-8)  # uniform Kuhn policy
    assert min(ex) < 1e-3 and ex[-1] < 1e-3 and ex[-1] < ex[0] / 100
    # the reported number is OpenSpiel's exploitability of the reported policy
    tab = tree.to_tabular_policy(res.policy, game)
    assert ex[-1] == pytest.approx(os_exploitability.exploitability(game, tab), abs=1e-10)
    # and that policy is the evaluation meta-strategy's mixture
    again = mixture_behaviour_policy(tree, res.populations, res.meta_strategies[-1])
    torch.testing.assert_close(again, res.policy)


def test_psro_uniform_is_fictitious_play_and_shor_runs(kuhn):
    tree, _ = kuhn
    res = run_psro(tree, 6, "uniform")
    assert all(np.allclose(m, 1 / len(m)) for ms_ in res.meta_strategies for m in ms_)
    assert res.exploitability[-1] < res.exploitability[0]
    res = run_psro(tree, 3, "shor-train", "shor-eval")
    assert res.train_solver == "shor-train" and res.eval_solver == "shor-eval"
    assert len(res.train_meta_strategies) == 3 and len(res.exploitability) == 4
    for k, tms in enumerate(res.train_meta_strategies):
        _assert_distributions(tms, [k + 1, k + 1])
    for k, ems in enumerate(res.meta_strategies):
        _assert_distributions(ems, [k + 1, k + 1])
