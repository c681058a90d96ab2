"""The fast PSRO meta-solvers against plain loop-based transcriptions of
their update rules, on small random 3- and 4-player meta-games.

References, written here from the papers rather than from the implementation:

* PRD: projected replicator dynamics (Lanctot et al. 2017, "A Unified
  Game-Theoretic Approach to Multiagent Reinforcement Learning"), as in
  OpenSpiel: ``x <- P(x + dt x (u - x.u))`` for every player at once, ``P`` the
  Euclidean projection on ``{y >= gamma, sum y = 1}``, answer the average of
  the trajectory (initial point included);
* RM: regret matching (Hart & Mas-Colell 2000) on the meta-game, as in
  OpenSpiel: simultaneous updates, initial regrets 1e-6, ``gamma``-uniform
  mixing, trajectory average;
* SHOR: the hybrid optimistic regret matching+ / softmax solver of SHOR-PSRO
  (arXiv 2602.16928, Listing 6), players updated in turn.

Payoff vectors are contracted one axis at a time with ``np.tensordot`` and the
projection is the textbook sort-and-threshold rule, so neither shares code or
arithmetic order with the implementation. Meta-games whose populations repeat
members (as PSRO's do) exercise the merged contraction.
"""

from __future__ import annotations

import numpy as np
import pytest

from societas.marl.games import metasolvers as ms

# ------------------------------------------------------------ references --


def _payoff_vector(game: np.ndarray, strategies: list[np.ndarray], p: int) -> np.ndarray:
    """Player ``p``'s payoff for each pure strategy against the others' mixtures."""
    u = game
    for q in reversed(range(len(strategies))):
        if q != p:
            u = np.tensordot(u, strategies[q], axes=([q], [0]))
    return u


def _project(x: np.ndarray, gamma: float) -> np.ndarray:
    """Euclidean projection of ``x`` on ``{y : y_i >= gamma, sum y = 1}``:
    ``y = gamma + max(x - gamma - theta, 0)`` with the threshold ``theta`` of
    the simplex of mass ``1 - n gamma`` (sort, then the largest prefix whose
    mean excess stays below its smallest member)."""
    n = len(x)
    z = x - gamma
    mass = 1.0 - n * gamma
    mu = sorted(z, reverse=True)
    total, theta = 0.0, 0.0
    for j in range(n):
        total += mu[j]
        t = (total - mass) / (j + 1)
        if mu[j] - t > 0:
            theta = t
    return gamma + np.array([max(v - theta, 0.0) for v in z])


def _reference_prd(games, iterations, dt, gamma, floor_hits=None):
    """The trajectory average; ``floor_hits`` (a list) receives the number of
    entries the projection put on the floor ``gamma``."""
    N = len(games)
    x = [np.ones(n) / n for n in games[0].shape]
    total = [s.copy() for s in x]
    hits = 0
    for _ in range(iterations):
        u = [_payoff_vector(games[p], x, p) for p in range(N)]
        x = [_project(x[p] + dt * x[p] * (u[p] - x[p] @ u[p]), gamma) for p in range(N)]
        for p in range(N):
            total[p] += x[p]
            hits += int((x[p] == gamma).sum())
    if floor_hits is not None:
        floor_hits.append(hits)
    return [t / (iterations + 1) for t in total]


def _reference_rm(games, iterations, gamma):
    N = len(games)
    x = [np.ones(n) / n for n in games[0].shape]
    regrets = [np.full(n, 1e-6) for n in games[0].shape]
    total = [s.copy() for s in x]
    for _ in range(iterations):
        u = [_payoff_vector(games[p], x, p) for p in range(N)]
        new = []
        for p in range(N):
            n = len(x[p])
            regrets[p] = regrets[p] + u[p] - x[p] @ u[p]
            positive = np.array([max(r, 0.0) for r in regrets[p]])
            if positive.sum() > 0:
                new.append(gamma / n + (1 - gamma) * positive / positive.sum())
            else:
                new.append(np.ones(n) / n)
        x = new
        for p in range(N):
            total[p] += x[p]
    return [t / (iterations + 1) for t in total]


def _reference_shor(games, iterations, blend, temperature, beta, diversity, average):
    N = len(games)
    sizes = games[0].shape
    x = [np.ones(n) / n for n in sizes]
    regrets = [np.zeros(n) for n in sizes]
    previous = [np.zeros(n) for n in sizes]
    total = [np.zeros(n) for n in sizes]
    for _ in range(iterations):
        for p in range(N):
            u = _payoff_vector(games[p], x, p)
            centred = u - np.mean(u)
            gains = (1 + beta) * centred - beta * previous[p] + diversity * (1.0 - x[p])
            largest = np.max(np.abs(gains))
            if largest > 1e-8:
                gains = gains / largest
            regrets[p] = np.maximum(0.0, regrets[p] + gains)
            orm = regrets[p] / regrets[p].sum() if regrets[p].sum() > 1e-12 else np.ones(sizes[p]) / sizes[p]
            soft = np.exp((u - np.max(u)) / temperature)
            soft = soft / soft.sum()
            x[p] = (1 - blend) * orm + blend * soft
            previous[p] = centred
            total[p] += x[p]
    if average:
        return [t / t.sum() for t in total]
    return x


# ---------------------------------------------------------------- games --


def _random_games(shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape) for _ in shape]


def _repeated_members(classes_per_player, size, seed):
    """A meta-game whose populations repeat members: ``size`` members per
    player drawn from ``classes_per_player[p]`` distinct ones, payoffs of
    repeats equal up to relative noise 1e-15 (as PSRO's, computed in different
    contractions). Returns the games and each player's member -> class map."""
    rng = np.random.default_rng(seed)
    N = len(classes_per_player)
    base = [rng.normal(size=tuple(classes_per_player)) for _ in range(N)]
    maps = []
    for d in classes_per_player:
        m = np.concatenate([np.arange(d), rng.integers(0, d, size=size - d)])
        maps.append(rng.permutation(m))
    games = []
    for b in base:
        g = b[np.ix_(*maps)]
        games.append(g * (1 + 1e-15 * rng.standard_normal(g.shape)))
    return games, maps


def _zero_sum(games):
    """The same game with the last player's payoff minus the others' sum."""
    return list(games[:-1]) + [-np.sum(games[:-1], axis=0)]


def _max_diff(a, b):
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b))


def _moved(out):
    return max(float(np.abs(s - 1 / len(s)).max()) for s in out)


MERGED = {
    "3p": ((4, 3, 5), 16, 11),  # 16^3 = 4096 profiles
    "4p": ((3, 4, 2, 3), 8, 12),  # 8^4 = 4096 profiles
}


@pytest.fixture(scope="module")
def merged_games():
    return {k: _repeated_members(d, n, seed) for k, (d, n, seed) in MERGED.items()}


# ---------------------------------------------------------------- tests --


def test_member_classes_find_the_repeated_members(merged_games):
    for games, maps in merged_games.values():
        pv = ms._PayoffVectors(games, exact=False)
        assert pv.merged
        for got, want in zip(pv.classes, maps):
            # the same partition of the members (class labels may differ)
            pairs = set(zip(got.tolist(), want.tolist()))
            assert len(pairs) == len(set(got.tolist())) == len(set(want.tolist()))
    # distinct members are never merged
    assert not ms._PayoffVectors(_random_games((16, 16, 16), 0), exact=False).merged
    # regret matching keeps the plain contraction
    assert not ms._PayoffVectors(merged_games["3p"][0], exact=True).merged


@pytest.mark.parametrize("shape", [(5, 5, 5), (4, 4, 4, 4), (3, 4, 5)])
@pytest.mark.parametrize("dt,gamma", [(1e-3, 1e-6), (0.1, 1e-3)])
def test_prd_matches_reference(shape, dt, gamma):
    games = _random_games(shape, seed=sum(shape))
    hits = []
    ref = _reference_prd(games, 200, dt, gamma, hits)
    got = ms.projected_replicator_dynamics(games, 200, dt, gamma)
    assert _max_diff(got, ref) < 1e-10
    solver = ms.PRDSolver(iterations=200, dt=dt, gamma=gamma).get_meta_strategy(games)
    assert _max_diff(solver, ref) < 1e-10
    assert _moved(got) > (0.1 if dt > 1e-3 else 0.002)  # the dynamics moved away from uniform
    if dt > 1e-3:
        assert hits[0] > 50  # and the projection put entries on the floor


@pytest.mark.parametrize("shape", [(5, 5, 5), (4, 4, 4, 4)])
def test_prd_zero_sum_matches_reference(shape):
    games = _zero_sum(_random_games(shape, seed=sum(shape) + 3))
    assert ms._PayoffVectors(games, exact=False).zero_sum
    hits = []
    ref = _reference_prd(games, 200, 0.1, 1e-3, hits)
    got = ms.projected_replicator_dynamics(games, 200, 0.1, 1e-3)
    assert _max_diff(got, ref) < 1e-10
    assert _moved(got) > 0.05 and hits[0] > 0


@pytest.mark.parametrize("key", sorted(MERGED))
@pytest.mark.parametrize("zero_sum", [False, True])
def test_prd_merged_matches_reference(merged_games, key, zero_sum):
    games, _ = merged_games[key]
    if zero_sum:
        games = _zero_sum(games)
    pv = ms._PayoffVectors(games, exact=False)
    assert pv.merged and pv.zero_sum == zero_sum
    hits = []
    ref = _reference_prd(games, 200, 0.1, 1e-3, hits)
    got = ms.projected_replicator_dynamics(games, 200, 0.1, 1e-3)
    assert _max_diff(got, ref) < 1e-10
    assert _moved(got) > 0.05 and hits[0] > 50


@pytest.mark.parametrize("shape", [(5, 5, 5), (4, 4, 4, 4), (3, 4, 5)])
@pytest.mark.parametrize("gamma", [1e-6, 1e-2])
def test_rm_matches_reference(shape, gamma):
    games = _random_games(shape, seed=sum(shape) + 1)
    ref = _reference_rm(games, 200, gamma)
    got = ms.regret_matching(games, 200, gamma)
    assert _max_diff(got, ref) < 1e-10
    solver = ms.RMSolver(iterations=200, gamma=gamma).get_meta_strategy(games)
    assert _max_diff(solver, ref) < 1e-10
    assert _moved(got) > 0.05


def test_rm_on_repeated_members_matches_reference(merged_games):
    games, _ = merged_games["4p"]
    assert ms._PayoffVectors(games, exact=False).merged  # the default contracts the merged tensor
    got = ms.regret_matching(games, 200)
    assert _max_diff(got, _reference_rm(games, 200, 1e-6)) < 1e-10
    assert _moved(got) > 0.05
    # exact mode: OpenSpiel's arithmetic, the unmerged tensor
    exact = ms.regret_matching(games, 200, exact=True)
    assert _max_diff(exact, _reference_rm(games, 200, 1e-6)) < 1e-10
    solver = ms.RMSolver(iterations=200, exact=True).get_meta_strategy(games)
    assert _max_diff(solver, exact) < 1e-12


def test_merged_rm_gives_repeated_members_equal_probability(merged_games):
    # In real arithmetic repeated members keep equal regrets; merging makes that hold exactly.
    games, maps = merged_games["4p"]
    got = ms.regret_matching(games, 2000)
    for strategy, classes in zip(got, maps):
        for c in set(classes.tolist()):
            members = strategy[classes == c]
            assert np.ptp(members) == 0.0


SHOR_SETTINGS = [
    # training solver at its first call, evaluation solver (arXiv 2602.16928, Listing 6)
    {"blend": 0.3 * 74 / 75 + 0.05 / 75, "temperature": 0.5 * 74 / 75 + 0.01 / 75, "beta": 0.5},
    {"blend": 0.01, "temperature": 0.001, "beta": 0.2, "diversity": 0.0, "average": False},
]


def _shor_kwargs(setting):
    return {
        "blend": setting["blend"],
        "temperature": setting["temperature"],
        "beta": setting["beta"],
        "diversity": setting.get("diversity", 0.05 * 74 / 75 + 0.001 / 75),
        "average": setting.get("average", True),
    }


def _run_shor(games, iterations, kw):
    return ms.hybrid_orm_solver(
        games,
        iterations,
        blending_factor=kw["blend"],
        temperature=kw["temperature"],
        momentum_beta=kw["beta"],
        diversity_bonus_coeff=kw["diversity"],
        return_average_strategy=kw["average"],
    )


@pytest.mark.parametrize("shape", [(5, 5, 5), (4, 4, 4, 4), (3, 4, 5)])
@pytest.mark.parametrize("setting", range(len(SHOR_SETTINGS)))
def test_shor_hybrid_matches_reference(shape, setting):
    kw = _shor_kwargs(SHOR_SETTINGS[setting])
    games = _random_games(shape, seed=sum(shape) + 2)
    ref = _reference_shor(games, 200, **kw)
    got = _run_shor(games, 200, kw)
    assert _max_diff(got, ref) < 1e-10
    assert _moved(got) > 0.05


@pytest.mark.parametrize("key", sorted(MERGED))
@pytest.mark.parametrize("setting", range(len(SHOR_SETTINGS)))
def test_shor_hybrid_merged_matches_reference(merged_games, key, setting):
    kw = _shor_kwargs(SHOR_SETTINGS[setting])
    games, _ = merged_games[key]
    ref = _reference_shor(games, 200, **kw)
    got = _run_shor(games, 200, kw)
    assert _max_diff(got, ref) < 1e-10
    assert _moved(got) > 0.05


def test_shor_solvers_match_reference_at_their_settings(merged_games):
    games, _ = merged_games["3p"]
    train = ms.SHORTrainSolver(base_solver_iterations=150, max_solver_iterations=150)
    kw = _shor_kwargs(SHOR_SETTINGS[0])
    assert _max_diff(train.get_meta_strategy(games), _reference_shor(games, 150, **kw)) < 1e-10
    evaluation = ms.SHOREvalSolver(base_solver_iterations=150, max_solver_iterations=150)
    kw = _shor_kwargs(SHOR_SETTINGS[1])
    assert _max_diff(evaluation.get_meta_strategy(games), _reference_shor(games, 150, **kw)) < 1e-10


def test_repeated_calls_are_answered_from_the_cache_without_aliasing():
    games = _random_games((4, 4, 4), seed=5)
    first = ms.PRDSolver(iterations=300, dt=0.05).get_meta_strategy(games)
    first[0][:] = -1.0  # the caller's copy only
    again = ms.PRDSolver(iterations=300, dt=0.05).get_meta_strategy([g.copy() for g in games])
    assert _max_diff(again, _reference_prd(games, 300, 0.05, 1e-6)) < 1e-10
    # a different meta-game or different settings are solved afresh
    other = [g.copy() for g in games]
    other[1][0, 0, 0] += 1.0
    assert _max_diff(ms.PRDSolver(iterations=300, dt=0.05).get_meta_strategy(other), again) > 0
    assert _max_diff(ms.PRDSolver(iterations=301, dt=0.05).get_meta_strategy(games), again) > 0
