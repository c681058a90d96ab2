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
* ``alpharank`` — each population's marginal of α-Rank's stationary
  distribution (infinite α with OpenSpiel's ε sweep,
  :mod:`societas.marl.games.alpharank`), OpenSpiel's ``psro_v2`` rule for a
  non-symmetric meta-game; at most 4096 joint profiles.
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

The iterative solvers are written for speed, at unchanged results:

* the replicator and regret-matching steps of all players are done at once on
  stacked ``[N, n]`` arrays when the populations have equal sizes (the PSRO
  case), in preallocated buffers; the simplex projection first tries the
  previous step's support (one sort every few thousand steps);
* payoff vectors are matrix-vector products on pre-transposed contiguous
  tensors. For replicator dynamics and the SHOR hybrid, whose results move by
  rounding only, repeated members of a 3+-player population (PSRO's best
  responses repeat) are merged into one row of a smaller tensor, and in a
  zero-sum meta-game the last player's payoff vector comes from the others'
  tensors, one tensor pass fewer (:class:`_PayoffVectors`);
* regret matching is chaotic over 1e5 iterations (a change in the last bit of
  a payoff vector moves its average by up to 1e-2); it contracts the merged
  tensor too (the same algorithm in real arithmetic), and ``exact=True``
  keeps OpenSpiel's arithmetic bit for bit, shedding only Python overhead;
* ``prd`` and ``rm`` remember their last answers (keyed by a digest of the
  meta-game): PSRO asks for the same meta-game twice in a row, for the
  evaluation meta-strategy after an iteration and the training one of the next.
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import linprog

from .alpharank import alpharank_marginals

__all__ = [
    "META_SOLVERS",
    "AlphaRankSolver",
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


# Members whose payoff slices agree to within this fraction of the largest
# |payoff| are merged by the merged contraction (see _member_classes).
_MERGE_TOL = 1e-12
# Merging is tried for meta-games of at least 3 players and this many joint profiles.
_MERGE_MIN_PROFILES = 4096


def _leave_one_out(tensor: np.ndarray, vectors: Sequence[np.ndarray], q: int) -> np.ndarray:
    """``tensor`` contracted with ``vectors[r]`` on every axis ``r != q``."""
    x = tensor
    for r in range(q):  # leading axes: vector-matrix products
        x = vectors[r] @ x.reshape(x.shape[0], -1)
        x = x.reshape(tensor.shape[r + 1 :])
    for r in range(tensor.ndim - 1, q, -1):  # trailing axes: matrix-vector products
        x = x.reshape(-1, x.shape[-1]) @ vectors[r]
        x = x.reshape(tensor.shape[q:r])
    return x


def _member_classes(games: list[np.ndarray]) -> list[np.ndarray] | None:
    """Per player ``q``: the class of each member of ``q``'s population, where
    members whose payoff slices (in every player's tensor) agree to within
    ``_MERGE_TOL`` times the largest |payoff| share a class; ``None`` when the
    classes would not shrink the tensor enough to pay for themselves.

    PSRO's best responses repeat (4-player Kuhn poker's populations of 51
    members hold about 15 distinct policies each), and their meta-game entries,
    computed in different contractions, agree to rounding. Candidates are
    grouped by a random linear fingerprint of the slices (near-equal slices
    give near-equal fingerprints); the grouping is then checked entry by entry
    against the whole tensor, and refused if any entry is further than the
    tolerance from its class representative's."""
    N = len(games)
    shape = games[0].shape
    scale = max(float(np.abs(g).max()) for g in games)
    if not np.isfinite(scale):
        return None
    tol = _MERGE_TOL * scale
    rng = np.random.default_rng(0x5EED)
    coef = rng.uniform(0.5, 1.5, size=N)
    vectors = [rng.uniform(0.5, 1.5, size=int(n)) for n in shape]
    mixed = coef[0] * games[0]
    for c, g in zip(coef[1:], games[1:]):
        mixed += c * g
    classes, reps = [], []
    for q in range(N):
        fp = _leave_one_out(mixed, vectors, q)
        others = float(np.prod([vectors[r].sum() for r in range(N) if r != q]))
        bound = 2.0 * tol * coef.sum() * others + 1e-13 * float(np.abs(fp).max())
        cls = np.empty(shape[q], dtype=np.intp)
        rep: list[int] = []
        for k in range(shape[q]):
            near = [j for j, r in enumerate(rep) if abs(fp[k] - fp[r]) <= bound]
            if near:
                cls[k] = near[0]
            else:
                cls[k] = len(rep)
                rep.append(k)
        classes.append(cls)
        reps.append(np.asarray(rep, dtype=np.intp))
    if np.prod([len(r) for r in reps], dtype=float) > 0.5 * np.prod(shape, dtype=float):
        return None
    tail = np.ix_(*classes[1:])
    for g in games:
        core = g[np.ix_(*reps)]
        for k in range(shape[0]):
            if np.abs(core[classes[0][k]][tail] - g[k]).max() > tol:
                return None
    return classes


class _PayoffVectors:
    """``u_p`` = the payoff of each pure strategy of ``p`` against the others'
    mixed strategies.

    ``exact=True`` contracts the payoff tensors in OpenSpiel's order (last
    player first, with the same BLAS calls), bit for bit, for regret
    matching's exact mode (its trajectory is chaotic: a change in the last
    bit of a payoff vector changes its 1e5-iteration average by up to 1e-2).
    ``exact=False`` (the default of every solver) may contract a merged
    tensor instead: members of a population with the same payoffs
    (:func:`_member_classes`) are one row of a smaller *core* tensor, the
    strategies are summed over each class (``reduce``), the core is contracted
    and the result is expanded back to the members."""

    def __init__(self, games: list[np.ndarray], exact: bool = True):
        self.n_players = N = len(games)
        self.shape = shape = games[0].shape
        self.games = games
        self.exact = exact
        # contraction order: last player first (exact), first player first (otherwise)
        self.others = [[q for q in range(N) if q != p] for p in range(N)]
        if exact:
            self.others = [o[::-1] for o in self.others]
        self.classes: list[np.ndarray] | None = None
        self._blk: np.ndarray | None = None
        if N == 2:
            self.m0 = np.ascontiguousarray(games[0])  # [n0, n1]
            self.m1t = np.ascontiguousarray(games[1].T)  # [n1, n0]
            return
        tensors = games
        if not exact and np.prod(shape, dtype=float) >= _MERGE_MIN_PROFILES:
            self.classes = _member_classes(games)
        if self.classes is not None:
            reps = [np.unique(c, return_index=True)[1] for c in self.classes]
            tensors = [g[np.ix_(*reps)] for g in games]
            self.sizes = [len(r) for r in reps]
            offsets = np.concatenate([[0], np.cumsum(self.sizes)])
            self.offsets = [int(o) for o in offsets]
            if len(set(shape)) == 1:
                # one index for all players: member k of player p -> slot of its class
                self.flat = np.concatenate([c + o for c, o in zip(self.classes, offsets)])
        self.tensors = tensors
        self._moved: list[np.ndarray] | None = None
        self._zero_sum: list[np.ndarray] | None = None
        self.zero_sum = False
        if not exact:
            scale = max(float(np.abs(t).max()) for t in tensors)
            total = np.sum(tensors, axis=0)
            self.zero_sum = bool(np.isfinite(scale) and float(np.abs(total).max()) <= _MERGE_TOL * scale)

    @property
    def moved(self) -> list[np.ndarray]:
        """Player ``p``'s tensor with ``p``'s axis first (exact) or last."""
        if self._moved is None:
            N = self.n_players
            self._moved = []
            for p, g in enumerate(self.tensors):
                others = [q for q in range(N) if q != p]
                order = [p] + others if self.exact else others + [p]
                self._moved.append(np.ascontiguousarray(np.transpose(g, order)))
        return self._moved

    @property
    def merged(self) -> bool:
        return self.classes is not None

    def reduce(self, q: int, s: np.ndarray) -> np.ndarray:
        """Player ``q``'s strategy in the form :meth:`one_reduced` takes."""
        if self.classes is None:
            return s
        return np.bincount(self.classes[q], weights=s, minlength=self.sizes[q])

    def _contract(self, p: int, reduced: Sequence[np.ndarray]) -> np.ndarray:
        """Player ``p``'s (possibly merged) tensor contracted with the others'
        (reduced) strategies: last player first with one ``@`` per axis
        (exact), or first player first (otherwise)."""
        acc = self.moved[p]
        if self.exact:
            for q in self.others[p]:
                acc = acc @ reduced[q]
            return acc
        # the tensor is stored with p's axis last: one vector-matrix product
        # over the whole tensor per leading axis
        for q in self.others[p]:
            v = reduced[q]
            acc = np.dot(v, acc.reshape(len(v), -1))
        return acc

    def one_reduced(self, p: int, reduced: Sequence[np.ndarray]) -> np.ndarray:
        acc = self._contract(p, reduced)
        return acc if self.classes is None else acc[self.classes[p]]

    def one(self, p: int, strategies) -> np.ndarray:
        if self.n_players == 2:
            return self.m0 @ strategies[1] if p == 0 else self.m1t @ strategies[0]
        if self.classes is None:
            return self.one_reduced(p, strategies)
        return self.one_reduced(p, [s if q == p else self.reduce(q, s) for q, s in enumerate(strategies)])

    def all(self, strategies) -> list[np.ndarray]:
        return [self.one(p, strategies) for p in range(self.n_players)]

    def stacked(self, S: np.ndarray) -> np.ndarray:
        """``[N, n]`` payoff vectors of the stacked ``[N, n]`` strategies
        (equal population sizes)."""
        N = self.n_players
        if N == 2:
            if self._blk is None:
                n = self.shape[0]
                blk = np.zeros((2 * n, 2 * n))
                blk[:n, n:] = self.m0
                blk[n:, :n] = self.m1t
                self._blk = blk
            # np.dot and @ both make this one cblas_dgemv call; np.dot has less overhead
            return np.dot(self._blk, S.reshape(-1)).reshape(2, -1)
        if self.classes is None:
            if not self.zero_sum:
                return np.stack(self.all(S))
            return self._stacked_zero_sum(S)
        agg = np.bincount(self.flat, weights=S.reshape(-1), minlength=self.offsets[-1])
        red = [agg[self.offsets[q] : self.offsets[q + 1]] for q in range(N)]
        if self.zero_sum:
            out = self._stacked_zero_sum(red).reshape(-1)
        else:
            out = np.empty(self.offsets[-1])
            for p in range(N):
                out[self.offsets[p] : self.offsets[p + 1]] = self._contract(p, red)
        return out[self.flat].reshape(N, -1)

    def _stacked_zero_sum(self, red) -> np.ndarray:
        """All payoff vectors of a zero-sum game from ``N - 1`` tensors: the
        last player's is minus the sum of the others' tensors contracted with
        the first ``N - 1`` strategies, and player ``p``'s tensor with axes
        ``(rest..., N-1, p)`` gives both ``p``'s vector and its share of the
        last player's in one pass."""
        N = self.n_players
        if self._zero_sum is None:
            self._zero_sum = [
                np.ascontiguousarray(np.transpose(t, [q for q in range(N - 1) if q != p] + [N - 1, p]))
                for p, t in enumerate(self.tensors[:-1])
            ]
        out = []
        last = None
        for p, acc in enumerate(self._zero_sum):
            for q in range(N - 1):
                if q != p:
                    v = red[q]
                    acc = np.dot(v, acc.reshape(len(v), -1))
            w = acc.reshape(len(red[N - 1]), -1)  # [n_{N-1}, n_p]
            out.append(np.dot(red[N - 1], w))
            part = np.dot(w, red[p])
            last = part if last is None else last + part
        assert last is not None  # N >= 3: at least two tensors above
        out.append(-last)
        return np.concatenate(out) if self.classes is not None else np.stack(out)


class _StackedAverager:
    """Average of ``[N, n]`` points: all of them, or the last ``window``."""

    def __init__(self, window: int | None, first: np.ndarray):
        self.window = window
        self.count = 1
        if window is None:
            self.total = np.array(first, dtype=np.float64)
        else:
            self.buffer = np.empty((max(int(window), 1),) + first.shape)
            self.buffer[0] = first

    def append(self, S: np.ndarray) -> None:
        if self.window is None:
            self.total += S
        else:
            self.buffer[self.count % len(self.buffer)] = S
        self.count += 1

    def average(self) -> list[np.ndarray]:
        if self.window is None:
            return list(self.total / self.count)
        m = min(self.count, len(self.buffer))
        return list(self.buffer[:m].sum(0) / m)


class _Averager:
    """Trajectory average (all points, or the last ``window`` ones)."""

    def __init__(self, window: int | None):
        self.window = window
        self.total: list[np.ndarray] | None = None
        self.buffer: list[list[np.ndarray]] = []
        self.count = 0

    def append(self, strategies: Sequence[np.ndarray]) -> None:
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
        # sum() starts from 0; the buffer is not empty, so each sum is an array
        return [np.asarray(sum(b[p] for b in self.buffer)) / n for p in range(len(self.buffer[0]))]


class _SimplexProjector:
    """Row-wise L2 projection of an ``[R, n]`` array on ``{y : y >= gamma,
    sum y = 1}``: ``y = max(x + tau, gamma)`` with one shift ``tau`` per row.

    The sort-based algorithm is OpenSpiel's ``_simplex_projection`` with its
    constants precomputed (the test ``u_k + t_k <= gamma`` is monotone in
    ``k``, so its first success, which OpenSpiel finds with ``searchsorted``,
    is ``n`` minus the number of failures). Along a replicator trajectory the
    set of entries above ``gamma`` rarely changes, so each call first tries the
    previous call's set ``A``: ``tau = (1 - (n - |A|) gamma - sum_A x) / |A|``
    is the projection's shift exactly when ``x + tau`` is above ``gamma`` on
    ``A`` and only there (then ``sum_i max(x_i + tau, gamma) = 1``, and the
    shift with that property is unique); otherwise the sort decides."""

    # set with ``active`` by the first sorted projection
    active_bytes: bytes
    const: np.ndarray
    inv_size: np.ndarray

    def __init__(self, rows: int, n: int, gamma: float):
        idx = np.arange(1, n + 1)
        self.c0 = 1 - (n - idx) * gamma
        self.inv = 1.0 / idx
        self.offs = np.arange(rows) * n - 1
        self.n, self.gamma = n, gamma
        self.active: np.ndarray | None = None

    def sorted_projection(self, x: np.ndarray) -> np.ndarray:
        u = np.sort(x, axis=1)[:, ::-1]
        ut = (self.c0 - np.cumsum(u, axis=1)) * self.inv
        rho = self.n - (u + ut <= self.gamma).sum(1)
        return np.maximum(x + ut.ravel()[self.offs + rho][:, None], self.gamma)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        gamma = self.gamma
        active = self.active
        if active is not None:
            tau = (self.const - np.add.reduce(x * active, axis=1)) * self.inv_size
            y = x + tau[:, None]
            if (y > gamma).tobytes() == self.active_bytes:
                return np.maximum(y, gamma, out=y)
        y = self.sorted_projection(x)
        self.active = active = y > gamma
        self.active_bytes = active.tobytes()
        size = np.add.reduce(active, axis=1)
        self.const = 1 - (self.n - size) * gamma
        self.inv_size = 1.0 / size
        return y


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
    pv = _PayoffVectors(games, exact=False)
    strategies = (
        [np.asarray(s, dtype=np.float64).copy() for s in initial_strategies]
        if initial_strategies is not None
        else [np.ones(shape[k]) / shape[k] for k in range(N)]
    )
    window = average_over_last_n_strategies
    iterations = int(iterations)
    if len(set(shape)) == 1:  # stacked fast path: one [N, n] array
        S = np.stack(strategies)
        spare = np.empty_like(S)
        proj = _SimplexProjector(N, shape[0], gamma)
        avg = _StackedAverager(window, S)
        add_reduce = np.add.reduce
        for _ in range(iterations):
            V = pv.stacked(S)
            X = spare
            np.multiply(V, S, out=X)
            ret = add_reduce(X, axis=1, keepdims=True)
            np.subtract(V, ret, out=X)
            X *= S
            X *= dt
            X += S  # S + dt * (S * (V - ret))
            spare, S = S, proj(X)
            avg.append(S)
        return avg.average()
    traj = _Averager(window)
    projs = [_SimplexProjector(1, shape[p], gamma) for p in range(N)]
    traj.append(strategies)
    for _ in range(iterations):
        payoffs = pv.all(strategies)
        new = []
        for p in range(N):
            s = strategies[p]
            delta = s * (payoffs[p] - np.dot(payoffs[p], s))
            new.append(projs[p]((s + dt * delta)[None])[0])
        strategies = new
        traj.append(strategies)
    return traj.average()


def regret_matching(
    meta_games: Sequence[np.ndarray],
    iterations: int = int(1e5),
    gamma: float = 1e-6,
    average_over_last_n_strategies: int | None = None,
    initial_strategies: Sequence[np.ndarray] | None = None,
    exact: bool = False,
) -> list[np.ndarray]:
    """Regret matching with simultaneous updates, as OpenSpiel's
    ``regret_matching`` (initial regrets 1e-6, ``gamma``-uniform mixing,
    average of the trajectory).

    The trajectory is chaotic: a change in the last bit of one payoff vector
    moves the 1e5-iteration average by up to 1e-2. ``exact=True`` does every
    step's floating-point operations in the order and with the BLAS calls of
    the straightforward implementation (OpenSpiel's), bit for bit, and only
    saves Python overhead; on 4-player Kuhn poker's PSRO meta-games that is
    about four hours per held-out run. By default (``exact=False``) the payoff
    vectors come from the merged tensor, as for replicator dynamics: members
    with the same payoffs (PSRO's repeated best responses) share one row.
    That is the same algorithm in real arithmetic — repeated members have
    equal payoff vectors, hence equal regrets and equal probabilities, at
    every step — in another floating-point order; over a few hundred steps
    the two agree to 1e-10, over 1e5 the chaos separates them as it would
    separate any two implementations."""
    games = _as_games(meta_games)
    N = len(games)
    shape = games[0].shape
    pv = _PayoffVectors(games, exact=exact)
    strategies: list[np.ndarray] = (
        [np.asarray(s, dtype=np.float64).copy() for s in initial_strategies]
        if initial_strategies is not None
        else [np.ones(shape[k]) / shape[k] for k in range(N)]
    )
    window = average_over_last_n_strategies
    iterations = int(iterations)
    if len(set(shape)) == 1:
        n = shape[0]
        S = np.stack(strategies)
        R = np.full((N, n), 1e-6)
        uni = np.full((N, n), 1.0 / n)
        gamma_uni = gamma * uni
        keep = 1 - gamma
        avg = _StackedAverager(window, S)
        X = np.empty((N, n))
        pos = np.empty((N, n))
        add_reduce = np.add.reduce
        for _ in range(iterations):
            V = pv.stacked(S)
            np.multiply(V, S, out=X)
            np.subtract(V, add_reduce(X, axis=1, keepdims=True), out=X)
            R += X  # R += V - (V * S).sum(1, keepdims=True)
            np.maximum(R, 0.0, out=pos)
            tot = add_reduce(pos, axis=1, keepdims=True)
            if tot.min() > 0:
                S = np.divide(pos, tot)
                S *= keep
                S += gamma_uni  # gamma * uni + (1 - gamma) * (pos / tot)
            else:
                ok = tot > 0
                S = np.where(ok, gamma_uni + keep * (pos / np.where(ok, tot, 1.0)), uni)
            avg.append(S)
        return avg.average()
    traj = _Averager(window)
    regrets = [np.full(shape[k], 1e-6) for k in range(N)]
    traj.append(strategies)
    for _ in range(iterations):
        payoffs = pv.all(strategies)
        new = []
        for p in range(N):
            regrets[p] += payoffs[p] - np.dot(payoffs[p], strategies[p])
            pos = np.maximum(regrets[p], 0.0)
            tot = pos.sum()
            uni_p = np.full(shape[p], 1.0 / shape[p])
            new.append(gamma * uni_p + (1 - gamma) * pos / tot if tot > 0 else uni_p)
        strategies = new
        traj.append(strategies)
    return traj.average()


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
    of arXiv 2602.16928, Listing 6): the same update, player by player in the
    same order, with the same arithmetic."""
    games = _as_games(meta_games)
    N = len(games)
    num_strats = [games[0].shape[p] for p in range(N)]
    pv = _PayoffVectors(games, exact=False)
    strategies = [np.ones(s) / s for s in num_strats]
    uniforms = [np.ones(s) / s for s in num_strats]
    cum_regrets = [np.zeros(s) for s in num_strats]
    avg = [np.zeros(s) for s in num_strats]
    prev = [np.zeros(s) for s in num_strats]
    reduced = [pv.reduce(q, s) for q, s in enumerate(strategies)]
    beta = float(momentum_beta)
    lam = float(blending_factor)
    temp = float(temperature)
    div = float(diversity_bonus_coeff)
    keep = 1 - lam
    two = N == 2
    m0, m1t = (pv.m0, pv.m1t) if two else (None, None)
    add_reduce, max_reduce = np.add.reduce, np.maximum.reduce
    exp, absolute, maximum, dot = np.exp, np.abs, np.maximum, np.dot
    for _ in range(int(iterations)):
        for p in range(N):
            if two:
                assert m0 is not None and m1t is not None
                u = dot(m0, strategies[1]) if p == 0 else dot(m1t, strategies[0])
            else:
                u = pv.one_reduced(p, reduced)
            c = u - add_reduce(u) / num_strats[p]  # u - u.mean()
            g = c * (1 + beta)
            g -= beta * prev[p]
            if div:
                g += div * (1.0 - strategies[p])
            if gain_normalization:
                m = max_reduce(absolute(g))
                if m > 1e-8:
                    g /= m
            r = cum_regrets[p]
            r += g
            maximum(r, 0.0, out=r)
            tot = add_reduce(r)
            e = u - max_reduce(u)
            e /= temp
            exp(e, out=e)
            se = add_reduce(e)
            # (1 - lam) * orm + lam * soft
            if tot > 1e-12:
                s = r / tot
                s *= keep
            else:
                s = keep * uniforms[p]
            if se > 1e-12:
                e /= se
                e *= lam
                s += e
            else:
                s += lam * uniforms[p]
            strategies[p] = s
            prev[p] = c
            if not two:
                reduced[p] = pv.reduce(p, s)
            if return_average_strategy:
                avg[p] += s
    if return_average_strategy:
        return [_normalise(a) if a.sum() > 0 else np.ones(len(a)) / len(a) for a in avg]
    return [np.asarray(s) for s in strategies]


# -------------------------------------------------------------- result cache --

# PSRO asks for the meta-strategy of the same meta-game twice in a row: the
# evaluation meta-strategy after iteration k and the training one of
# iteration k+1 (with two solver objects when the roles are separate, as in
# the PSRO task). The deterministic iterative solvers keep their last few
# answers, keyed by their parameters and a digest of the meta-game's bytes.
_RESULTS: OrderedDict[tuple, list[np.ndarray]] = OrderedDict()
_RESULTS_SIZE = 4
_RESULTS_LOCK = threading.Lock()


def _cached(
    params: tuple, games: list[np.ndarray], solve: Callable[[], list[np.ndarray]]
) -> list[np.ndarray]:
    digest = hashlib.blake2b(digest_size=20)
    for g in games:
        digest.update(g.tobytes())  # C-order bytes, whatever the memory layout
    key = params + (games[0].shape, digest.digest())
    with _RESULTS_LOCK:
        hit = _RESULTS.get(key)
        if hit is not None:
            _RESULTS.move_to_end(key)
            return [h.copy() for h in hit]
    out = solve()
    with _RESULTS_LOCK:
        _RESULTS[key] = [np.array(o) for o in out]
        while len(_RESULTS) > _RESULTS_SIZE:
            _RESULTS.popitem(last=False)
    return out


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
        games = _as_games(meta_games)
        params = ("prd", self.iterations, self.dt, self.gamma, self.average_over_last_n_strategies)

        def solve():
            out = projected_replicator_dynamics(
                games, self.iterations, self.dt, self.gamma, self.average_over_last_n_strategies
            )
            return [_normalise(s) for s in out]

        return _cached(params, games, solve)


class RMSolver(MetaSolver):
    name = "rm"

    def __init__(
        self,
        iterations: int = int(1e5),
        gamma: float = 1e-6,
        average_over_last_n_strategies: int | None = None,
        exact: bool = False,
    ):
        self.iterations, self.gamma = int(iterations), gamma
        self.average_over_last_n_strategies = average_over_last_n_strategies
        self.exact = exact  # True: OpenSpiel's arithmetic bit for bit (see regret_matching)

    def get_meta_strategy(self, meta_games, **context):
        games = _as_games(meta_games)
        params = ("rm", self.iterations, self.gamma, self.average_over_last_n_strategies, self.exact)

        def solve():
            out = regret_matching(
                games, self.iterations, self.gamma, self.average_over_last_n_strategies, exact=self.exact
            )
            return [_normalise(s) for s in out]

        return _cached(params, games, solve)


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


class AlphaRankSolver(MetaSolver):
    """α-Rank's marginals (infinite α, ε sweep; :mod:`societas.marl.games.alpharank`), as
    OpenSpiel's ``psro_v2`` ``alpharank`` meta-strategy for a non-symmetric meta-game."""

    name = "alpharank"

    def get_meta_strategy(self, meta_games, **context):
        games = _as_games(meta_games)
        return _cached(("alpharank",), games, lambda: [_normalise(m) for m in alpharank_marginals(games)])


# ----------------------------------------------------------------- registry --

META_SOLVERS: dict[str, Callable[..., MetaSolver]] = {
    "alpharank": AlphaRankSolver,
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
