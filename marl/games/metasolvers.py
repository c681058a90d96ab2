"""Meta-solvers for PSRO: from a meta-game to one distribution per player.

This module is long because it gathers the PSRO meta-solvers behind one
interface and one registry, with the shared payoff and simplex helpers they
are built from, so that they can be read and compared in one place.

A *meta-game* is the normal-form game whose strategies are the members of the
players' PSRO populations: ``meta_games[p]`` is player ``p``'s payoff tensor of
shape ``(n_0, ..., n_{N-1})`` (one entry per joint profile of population
members). A meta-solver maps the list ``meta_games`` to a list of ``N``
probability vectors (the *meta-strategy*), the interface of the meta-strategy
solvers in Li, Schultz, Hennes & Lanctot, "Discovering Multiagent Learning
Algorithms with Large Language Models" (arXiv 2602.16928):

    solver.get_meta_strategy(meta_games, **context) -> list[np.ndarray]

Solvers are objects and may keep state between calls (the SHOR training solver
counts its calls to anneal its parameters). ``context`` carries optional
information from the PSRO loop (``iteration``, ``populations``); the solvers
here ignore it.

Built-in solvers (:data:`META_SOLVERS`, :func:`get_meta_solver`):

* ``uniform`` — uniform over each population (fictitious play over the
  population; Lanctot et al. 2017 show PSRO(uniform) = fictitious play).
* ``nash`` — a Nash equilibrium of a two-player zero-sum (constant-sum)
  meta-game, by the maximin linear program of each player
  (``max v  s.t.  x^T A e_j >= v  for all j,  x in simplex``), solved with
  ``scipy.optimize.linprog`` (HiGHS). Any other game is refused with an error.
* ``prd`` — Projected Replicator Dynamics (Lanctot et al. 2017, "A Unified
  Game-Theoretic Approach to Multiagent Reinforcement Learning", NeurIPS,
  arXiv 1711.00832): simultaneous replicator steps
  ``x <- P_gamma(x + dt * x * (u - x.u))`` projected on the simplex with every
  probability at least ``gamma``; the answer is the average of the whole
  trajectory (initial point included) or of its last ``n`` points. Same
  defaults and arithmetic as OpenSpiel's
  ``open_spiel.python.algorithms.projected_replicator_dynamics``
  (``prd_iterations=1e5, prd_dt=1e-3, prd_gamma=1e-6``).
* ``rm`` — regret matching (Hart & Mas-Colell 2000) with simultaneous updates,
  initial regrets ``1e-6``, ``gamma``-uniform exploration and trajectory
  averaging, as OpenSpiel's ``open_spiel.python.algorithms.regret_matching``
  (``iterations=1e5, gamma=1e-6``).
* ``shor-train`` / ``shor-eval`` — SHOR-PSRO's training and evaluation
  meta-strategy solvers (arXiv 2602.16928, Listing 6): a *hybrid* of
  optimistic regret matching+ and a softmax over pure-strategy payoffs. Per
  inner step and player ``p`` (players updated in turn, Gauss–Seidel):
  ``u`` = payoffs of ``p``'s pure strategies against the others' current
  strategies; ``c = u - mean(u)``; ``g = (1+beta) c - beta c_prev +
  div * (1 - sigma_p)``, divided by ``max|g|`` (gain normalisation);
  ``R <- max(0, R + g)``; ``sigma_p = (1-lambda) R/sum(R) + lambda *
  softmax(u / temperature)``. Training: ``lambda`` 0.3 -> 0.05, ``div``
  0.05 -> 0.001 and ``temperature`` 0.5 -> 0.01 linearly in
  ``min(1, k/75)`` (``k`` = number of calls, the first call being ``k=1``),
  ``beta = 0.5``, ``clip(1000 + 20 (n-1), 1000, 5000)`` inner iterations and
  the *average* of the iterates. Evaluation: ``lambda = 0.01``,
  ``temperature = 0.001``, ``div = 0``, ``beta = 0.2``,
  ``clip(8000 + 50 (n-1), 8000, 15000)`` iterations and the *last* iterate.
  ``n`` is player 0's population size.

The iterative solvers are written for speed: the replicator and
regret-matching steps of all players are done at once on stacked ``[N, n]``
arrays when the populations have equal sizes (the PSRO case), and two-player
payoff vectors are matrix-vector products with pre-transposed contiguous
matrices.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import linprog

__all__ = [
    "META_SOLVERS",
    "MetaSolver",
    "NashSolver",
    "PRDSolver",
    "RMSolver",
    "SHOREvalSolver",
    "SHORTrainSolver",
    "UniformSolver",
    "get_meta_solver",
    "hybrid_orm_solver",
    "meta_solver_names",
    "projected_replicator_dynamics",
    "register_meta_solver",
    "regret_matching",
    "zero_sum_nash",
]


# ------------------------------------------------------------------ helpers --


def _as_games(meta_games: Sequence[np.ndarray]) -> list[np.ndarray]:
    games = [np.asarray(m, dtype=np.float64) for m in meta_games]
    if not games:
        raise ValueError("meta_games is empty")
    n_players = len(games)
    shape = games[0].shape
    if len(shape) != n_players:
        raise ValueError(
            f"meta_games holds {n_players} payoff tensors, each must have {n_players} "
            f"dimensions (one per player); got shape {shape}"
        )
    for m in games:
        if m.shape != shape:
            raise ValueError(f"payoff tensors differ in shape: {shape} vs {m.shape}")
    if any(s == 0 for s in shape):
        raise ValueError(f"empty population in meta-game of shape {shape}")
    return games


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, None)
    s = x.sum()
    return x / s if s > 0 else np.full(len(x), 1.0 / len(x))


class _PayoffVectors:
    """``u_p = payoff of each pure strategy of p against the others' mixed
    strategies``, contracted in OpenSpiel's order (last player first)."""

    def __init__(self, games: list[np.ndarray]):
        self.n_players = len(games)
        self.games = games
        if self.n_players == 2:
            self.m0 = np.ascontiguousarray(games[0])  # [n0, n1]
            self.m1t = np.ascontiguousarray(games[1].T)  # [n1, n0]
        else:
            self.moved = []
            for p, g in enumerate(games):
                order = [p] + [q for q in range(self.n_players) if q != p]
                self.moved.append(np.ascontiguousarray(np.transpose(g, order)))

    def one(self, p: int, strategies) -> np.ndarray:
        if self.n_players == 2:
            return self.m0 @ strategies[1] if p == 0 else self.m1t @ strategies[0]
        acc = self.moved[p]
        for q in range(self.n_players - 1, -1, -1):
            if q != p:
                acc = acc @ strategies[q]
        return acc

    def all(self, strategies) -> list[np.ndarray]:
        return [self.one(p, strategies) for p in range(self.n_players)]


class _Averager:
    """Trajectory average (all points, or the last ``window`` ones)."""

    def __init__(self, window: int | None):
        self.window = window
        self.total: list[np.ndarray] | None = None
        self.buffer: list = []
        self.count = 0

    def append(self, strategies):
        if self.window is None:
            if self.total is None:
                self.total = [np.array(s, dtype=np.float64) for s in strategies]
            else:
                for t, s in zip(self.total, strategies):
                    t += s
        else:
            if len(self.buffer) < self.window:
                self.buffer.append([np.array(s) for s in strategies])
            else:
                self.buffer[self.count % self.window] = [np.array(s) for s in strategies]
        self.count += 1

    def average(self) -> list[np.ndarray]:
        if self.window is None:
            if self.total is None:
                raise ValueError("no strategies to average: append() was never called")
            return [t / self.count for t in self.total]
        n = len(self.buffer)
        return [sum(b[p] for b in self.buffer) / n for p in range(len(self.buffer[0]))]


class _SimplexProjector:
    """Row-wise L2 projection of an ``[R, n]`` array on ``{y : y >= gamma,
    sum y = 1}``: the sort-based algorithm of OpenSpiel's
    ``_simplex_projection`` with its constants precomputed. The test
    ``u_k + t_k <= gamma`` is monotone in ``k``, so its first success (what
    OpenSpiel finds with ``searchsorted``) is ``n`` minus the number of failures."""

    def __init__(self, rows: int, n: int, gamma: float):
        idx = np.arange(1, n + 1)
        self.c0 = 1 - (n - idx) * gamma
        self.inv = 1.0 / idx
        self.offs = np.arange(rows) * n - 1
        self.n, self.gamma = n, gamma

    def __call__(self, x: np.ndarray) -> np.ndarray:
        u = np.sort(x, axis=1)[:, ::-1]
        ut = (self.c0 - np.cumsum(u, axis=1)) * self.inv
        rho = self.n - (u + ut <= self.gamma).sum(1)
        return np.maximum(x + ut.ravel()[self.offs + rho][:, None], self.gamma)


# --------------------------------------------------------------- algorithms --


def projected_replicator_dynamics(
    meta_games: Sequence[np.ndarray],
    iterations: int = int(1e5),
    dt: float = 1e-3,
    gamma: float = 1e-6,
    average_over_last_n_strategies: int | None = None,
    initial_strategies: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Projected Replicator Dynamics (Lanctot et al. 2017), as OpenSpiel's
    ``projected_replicator_dynamics`` (exact simplex projection)."""
    games = _as_games(meta_games)
    N = len(games)
    shape = games[0].shape
    pv = _PayoffVectors(games)
    strategies = (
        [np.asarray(s, dtype=np.float64).copy() for s in initial_strategies]
        if initial_strategies is not None
        else [np.ones(shape[k]) / shape[k] for k in range(N)]
    )
    avg = _Averager(average_over_last_n_strategies)
    iterations = int(iterations)
    if len(set(shape)) == 1:  # stacked fast path: one [N, n] array
        S = np.stack(strategies)
        proj = _SimplexProjector(N, shape[0], gamma)
        avg.append(S)
        if N == 2:
            n = shape[0]
            blk = np.zeros((2 * n, 2 * n))
            blk[:n, n:] = pv.m0
            blk[n:, :n] = pv.m1t
            for _ in range(iterations):
                V = (blk @ S.reshape(-1)).reshape(2, n)
                ret = (V * S).sum(1, keepdims=True)
                S = proj(S + dt * (S * (V - ret)))
                avg.append(S)
        else:
            for _ in range(iterations):
                V = np.stack(pv.all(S))
                ret = (V * S).sum(1, keepdims=True)
                S = proj(S + dt * (S * (V - ret)))
                avg.append(S)
        return avg.average()
    projs = [_SimplexProjector(1, shape[p], gamma) for p in range(N)]
    avg.append(strategies)
    for _ in range(iterations):
        V = pv.all(strategies)
        new = []
        for p in range(N):
            s = strategies[p]
            delta = s * (V[p] - np.dot(V[p], s))
            new.append(projs[p]((s + dt * delta)[None])[0])
        strategies = new
        avg.append(strategies)
    return avg.average()


def regret_matching(
    meta_games: Sequence[np.ndarray],
    iterations: int = int(1e5),
    gamma: float = 1e-6,
    average_over_last_n_strategies: int | None = None,
    initial_strategies: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Regret matching with simultaneous updates, as OpenSpiel's
    ``regret_matching`` (initial regrets 1e-6, ``gamma``-uniform mixing,
    average of the trajectory)."""
    games = _as_games(meta_games)
    N = len(games)
    shape = games[0].shape
    pv = _PayoffVectors(games)
    strategies: list[np.ndarray] = (
        [np.asarray(s, dtype=np.float64).copy() for s in initial_strategies]
        if initial_strategies is not None
        else [np.ones(shape[k]) / shape[k] for k in range(N)]
    )
    avg = _Averager(average_over_last_n_strategies)
    iterations = int(iterations)
    if len(set(shape)) == 1:
        n = shape[0]
        S = np.stack(strategies)
        R = np.full((N, n), 1e-6)
        uni = np.full((N, n), 1.0 / n)
        avg.append(S)
        blk = None
        if N == 2:
            blk = np.zeros((2 * n, 2 * n))
            blk[:n, n:] = pv.m0
            blk[n:, :n] = pv.m1t
        for _ in range(iterations):
            V = (blk @ S.reshape(-1)).reshape(2, n) if blk is not None else np.stack(pv.all(S))
            R += V - (V * S).sum(1, keepdims=True)
            pos = np.maximum(R, 0.0)
            tot = pos.sum(1, keepdims=True)
            ok = tot > 0
            S = np.where(ok, gamma * uni + (1 - gamma) * (pos / np.where(ok, tot, 1.0)), uni)
            avg.append(S)
        return avg.average()
    regrets = [np.full(shape[k], 1e-6) for k in range(N)]
    avg.append(strategies)
    for _ in range(iterations):
        V = pv.all(strategies)
        new = []
        for p in range(N):
            regrets[p] += V[p] - np.dot(V[p], strategies[p])
            pos = np.maximum(regrets[p], 0.0)
            tot = pos.sum()
            uni_p = np.full(shape[p], 1.0 / shape[p])
            new.append(gamma * uni_p + (1 - gamma) * pos / tot if tot > 0 else uni_p)
        strategies = new
        avg.append(strategies)
    return avg.average()


def _lp_maximin(A: np.ndarray) -> tuple[np.ndarray, float]:
    """Maximin strategy of the row player of payoff matrix ``A``:
    ``max_{x, v} v  s.t.  A^T x >= v 1,  1^T x = 1,  x >= 0``."""
    m, n = A.shape
    c = np.zeros(m + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-A.T, np.ones((n, 1))])
    a_eq = np.zeros((1, m + 1))
    a_eq[0, :m] = 1.0
    res = linprog(
        c,
        A_ub=a_ub,
        b_ub=np.zeros(n),
        A_eq=a_eq,
        b_eq=[1.0],
        bounds=[(0, None)] * m + [(None, None)],
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"Nash LP failed: {res.message}")
    return _normalise(res.x[:m]), float(res.x[-1])


def zero_sum_nash(
    meta_games: Sequence[np.ndarray], tol: float = 1e-8
) -> tuple[list[np.ndarray], list[float]]:
    """A Nash equilibrium of a two-player constant-sum game, one LP per player.

    Returns ``([x, y], [v_row, v_col])``: the maximin strategies and the values
    they guarantee. Raises ``ValueError`` for any other game."""
    games = _as_games(meta_games)
    if len(games) != 2:
        raise ValueError(
            f"the 'nash' meta-solver computes Nash equilibria of two-player zero-sum "
            f"meta-games by linear programming; this meta-game has {len(games)} players "
            "(use 'prd', 'rm', 'uniform' or the SHOR solvers)"
        )
    a, b = games
    s = a + b
    scale = 1.0 + max(np.abs(a).max(), np.abs(b).max())
    if s.max() - s.min() > tol * scale:
        raise ValueError(
            "the 'nash' meta-solver needs a two-player zero-sum (constant-sum) meta-game; "
            f"payoff sums vary by {s.max() - s.min():.3g} (use 'prd', 'rm', 'uniform' "
            "or the SHOR solvers for general-sum games)"
        )
    x, v0 = _lp_maximin(a)
    y, v1 = _lp_maximin(b.T)
    return [x, y], [v0, v1]


# ------------------------------------------------------------- SHOR hybrid --


def hybrid_orm_solver(
    meta_games: Sequence[np.ndarray],
    iterations: int,
    blending_factor: float = 0.0,
    temperature: float = 0.1,
    momentum_beta: float = 0.0,
    gain_normalization: bool = True,
    diversity_bonus_coeff: float = 0.0,
    return_average_strategy: bool = True,
) -> list[np.ndarray]:
    """SHOR-PSRO's hybrid optimistic RM+ / softmax solver (``_hybrid_orm_solver``
    of arXiv 2602.16928, Listing 6), same statements in the same order."""
    games = _as_games(meta_games)
    N = len(games)
    num_strats = [games[0].shape[p] for p in range(N)]
    pv = _PayoffVectors(games)
    strategies = [np.ones(s) / s for s in num_strats]
    uniforms = [np.ones(s) / s for s in num_strats]
    cum_regrets = [np.zeros(s) for s in num_strats]
    avg = [np.zeros(s) for s in num_strats]
    prev = [np.zeros(s) for s in num_strats]
    beta = float(momentum_beta)
    lam = float(blending_factor)
    temp = float(temperature)
    div = float(diversity_bonus_coeff)
    for _ in range(int(iterations)):
        for p in range(N):
            u = pv.one(p, strategies)
            c = u - u.mean()
            g = (1 + beta) * c - beta * prev[p]
            g += div * (1.0 - strategies[p])
            if gain_normalization:
                m = np.abs(g).max()
                if m > 1e-8:
                    g /= m
            r = cum_regrets[p]
            r += g
            np.maximum(r, 0.0, out=r)
            tot = r.sum()
            orm = r / tot if tot > 1e-12 else uniforms[p]
            e = np.exp((u - u.max()) / temp)
            se = e.sum()
            soft = e / se if se > 1e-12 else uniforms[p]
            strategies[p] = (1 - lam) * orm + lam * soft
            prev[p] = c
            if return_average_strategy:
                avg[p] += strategies[p]
    if return_average_strategy:
        return [_normalise(a) if a.sum() > 0 else np.ones(len(a)) / len(a) for a in avg]
    return [np.asarray(s) for s in strategies]


# ------------------------------------------------------------------ solvers --


class MetaSolver(ABC):
    """Base class: ``get_meta_strategy(meta_games, **context)`` returns one
    distribution per player. ``stateless`` solvers give the same answer to the
    same meta-game, which lets PSRO reuse an evaluation result for training."""

    name = "base"
    stateless = True

    @abstractmethod
    def get_meta_strategy(self, meta_games: Sequence[np.ndarray], **context: Any) -> list[np.ndarray]:
        """One distribution per player over that player's population."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class UniformSolver(MetaSolver):
    name = "uniform"

    def get_meta_strategy(self, meta_games, **context):
        games = _as_games(meta_games)
        return [np.full(n, 1.0 / n) for n in games[0].shape]


class NashSolver(MetaSolver):
    """Nash equilibrium of a two-player zero-sum meta-game (LP, HiGHS)."""

    name = "nash"

    def get_meta_strategy(self, meta_games, **context):
        return zero_sum_nash(meta_games)[0]


class PRDSolver(MetaSolver):
    name = "prd"

    def __init__(
        self,
        iterations: int = int(1e5),
        dt: float = 1e-3,
        gamma: float = 1e-6,
        average_over_last_n_strategies: int | None = None,
    ):
        self.iterations, self.dt, self.gamma = int(iterations), dt, gamma
        self.average_over_last_n_strategies = average_over_last_n_strategies

    def get_meta_strategy(self, meta_games, **context):
        out = projected_replicator_dynamics(
            meta_games, self.iterations, self.dt, self.gamma, self.average_over_last_n_strategies
        )
        return [_normalise(s) for s in out]


class RMSolver(MetaSolver):
    name = "rm"

    def __init__(
        self,
        iterations: int = int(1e5),
        gamma: float = 1e-6,
        average_over_last_n_strategies: int | None = None,
    ):
        self.iterations, self.gamma = int(iterations), gamma
        self.average_over_last_n_strategies = average_over_last_n_strategies

    def get_meta_strategy(self, meta_games, **context):
        out = regret_matching(meta_games, self.iterations, self.gamma, self.average_over_last_n_strategies)
        return [_normalise(s) for s in out]


class SHORTrainSolver(MetaSolver):
    """SHOR-PSRO training solver (``TrainMetaStrategySolver``, Listing 6)."""

    name = "shor-train"
    stateless = False

    def __init__(
        self,
        base_solver_iterations=1000,
        iterations_per_policy_scale=20,
        max_solver_iterations=5000,
        initial_blending_factor=0.3,
        final_blending_factor=0.05,
        initial_temperature=0.5,
        final_temperature=0.01,
        momentum_beta=0.5,
        gain_normalization=True,
        initial_diversity_bonus_coeff=0.05,
        final_diversity_bonus_coeff=0.001,
        max_psro_iterations_for_annealing=75,
    ) -> None:
        self.base_solver_iterations = base_solver_iterations
        self.iterations_per_policy_scale = iterations_per_policy_scale
        self.max_solver_iterations = max_solver_iterations
        self.initial_blending_factor = initial_blending_factor
        self.final_blending_factor = final_blending_factor
        self.initial_temperature = initial_temperature
        self.final_temperature = final_temperature
        self.momentum_beta = momentum_beta
        self.gain_normalization = gain_normalization
        self.initial_diversity_bonus_coeff = initial_diversity_bonus_coeff
        self.final_diversity_bonus_coeff = final_diversity_bonus_coeff
        self.max_psro_iterations_for_annealing = max_psro_iterations_for_annealing
        self.calls = 0
        self.last_params: dict[str, float] | None = None

    def solver_iterations(self, n: int) -> int:
        it = int(self.base_solver_iterations + self.iterations_per_policy_scale * (n - 1))
        return int(np.clip(it, self.base_solver_iterations, self.max_solver_iterations))

    def schedule(self, k: int) -> dict[str, float]:
        """Blend, temperature and diversity coefficient at call ``k`` (1-based)."""
        prog = min(1.0, k / self.max_psro_iterations_for_annealing)

        def lin(a, b):
            return float(np.clip(a * (1.0 - prog) + b * prog, b, a))

        return {
            "blending_factor": lin(self.initial_blending_factor, self.final_blending_factor),
            "temperature": lin(self.initial_temperature, self.final_temperature),
            "diversity_bonus_coeff": lin(
                self.initial_diversity_bonus_coeff, self.final_diversity_bonus_coeff
            ),
        }

    def get_meta_strategy(self, meta_games, **context):
        games = _as_games(meta_games)
        self.calls += 1
        params = self.schedule(self.calls)
        iters = self.solver_iterations(games[0].shape[0])
        self.last_params = dict(params, iterations=iters, k=self.calls)
        return hybrid_orm_solver(
            games,
            iterations=iters,
            momentum_beta=self.momentum_beta,
            gain_normalization=self.gain_normalization,
            return_average_strategy=True,
            **params,
        )


class SHOREvalSolver(MetaSolver):
    """SHOR-PSRO evaluation solver (``EvalMetaStrategySolver``, Listing 6)."""

    name = "shor-eval"

    def __init__(
        self,
        base_solver_iterations=8000,
        iterations_per_policy_scale=50,
        max_solver_iterations=15000,
        blending_factor=0.01,
        temperature=0.001,
        momentum_beta=0.2,
        gain_normalization=True,
        diversity_bonus_coeff=0.0,
    ):
        self.base_solver_iterations = base_solver_iterations
        self.iterations_per_policy_scale = iterations_per_policy_scale
        self.max_solver_iterations = max_solver_iterations
        self.blending_factor = blending_factor
        self.temperature = temperature
        self.momentum_beta = momentum_beta
        self.gain_normalization = gain_normalization
        self.diversity_bonus_coeff = diversity_bonus_coeff

    def solver_iterations(self, n: int) -> int:
        it = int(self.base_solver_iterations + self.iterations_per_policy_scale * (n - 1))
        return int(np.clip(it, self.base_solver_iterations, self.max_solver_iterations))

    def get_meta_strategy(self, meta_games, **context):
        games = _as_games(meta_games)
        return hybrid_orm_solver(
            games,
            iterations=self.solver_iterations(games[0].shape[0]),
            blending_factor=self.blending_factor,
            temperature=self.temperature,
            momentum_beta=self.momentum_beta,
            gain_normalization=self.gain_normalization,
            diversity_bonus_coeff=self.diversity_bonus_coeff,
            return_average_strategy=False,
        )


# ----------------------------------------------------------------- registry --

META_SOLVERS: dict[str, Callable[..., MetaSolver]] = {
    "uniform": UniformSolver,
    "nash": NashSolver,
    "prd": PRDSolver,
    "rm": RMSolver,
    "shor-train": SHORTrainSolver,
    "shor-eval": SHOREvalSolver,
}


def register_meta_solver(name: str, factory: Callable[..., MetaSolver]) -> None:
    META_SOLVERS[name] = factory


def meta_solver_names() -> list[str]:
    return sorted(META_SOLVERS)


def get_meta_solver(solver: str | MetaSolver, **kwargs: Any) -> MetaSolver:
    """A meta-solver instance from a registered name (``kwargs`` go to its
    constructor) or an object with ``get_meta_strategy`` (returned as is)."""
    if not isinstance(solver, str):
        if not hasattr(solver, "get_meta_strategy"):
            raise TypeError(f"{solver!r} is neither a meta-solver name nor an object with get_meta_strategy")
        return solver
    try:
        factory = META_SOLVERS[solver]
    except KeyError:
        raise ValueError(f"unknown meta-solver {solver!r}; known: {', '.join(meta_solver_names())}") from None
    return factory(**kwargs)
