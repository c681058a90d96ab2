"""α-Rank (Omidshafiei et al. 2019, "α-Rank: Multi-Agent Evaluation by Evolution", Sci. Rep.) as
PSRO uses it: the infinite-α, multi-population model with its ε sweep.

Each joint profile of the meta-game's populations is a state of a Markov chain.
From profile ``s`` one population ``k`` switches its strategy to another one
``t`` (the profile ``s'``), with ``eta = 1 / sum_k (|S_k| - 1)``::

    C[s, s'] = eta * 0.5        if u_k(s') and u_k(s) are close (numpy.isclose, atol 1e-14)
             = eta * (1 - eps)  if u_k(s') > u_k(s)
             = eta * eps        otherwise
    C[s, s]  = 1 - sum of the row's other entries

``pi`` is the chain's stationary distribution (the left eigenvector of ``C``
for eigenvalue 1, which must be unique). The sweep starts at ``eps = 0.5``
and halves it until ``pi`` stops moving (``numpy.allclose`` of successive
answers, after more than ``min_iters`` steps); when ``eps`` is so small that
the eigenvector is no longer unique, it steps back and shrinks more slowly.
PSRO's meta-strategy is each population's marginal of ``pi``. These are the
rules of OpenSpiel's ``alpharank.sweep_pi_vs_epsilon`` and
``psro_v2.utils.alpharank_strategy`` (the multi-population branch), and the
tests compare the two on the same payoff tables.

The chain has one state per joint profile and its eigen-decomposition is
dense, as in OpenSpiel: meta-games of more than :data:`MAX_PROFILES` joint
profiles are refused with an error instead of running for hours.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.linalg

__all__ = ["MAX_PROFILES", "alpharank_marginals", "stationary_distribution", "sweep_pi_vs_epsilon"]

MAX_PROFILES = 4096
_CLOSE_ATOL = 1e-14
_UNIT_EIGENVALUE_TOL = 1e-10


def _transition_matrix(tables: Sequence[np.ndarray], eps: float) -> np.ndarray:
    shape = tables[0].shape
    n = int(np.prod(shape))
    eta = 1.0 / sum(s - 1 for s in shape)
    c = np.zeros((n, n))
    ids = np.arange(n).reshape(shape)  # row-major: the last population's strategy varies fastest
    for k, table in enumerate(tables):
        f = np.moveaxis(np.asarray(table, dtype=np.float64), k, -1)  # [..., s_k]
        idx = np.moveaxis(ids, k, -1)
        f_row, f_col = f[..., :, None], f[..., None, :]
        value = np.where(
            np.isclose(f_col, f_row, atol=_CLOSE_ATOL),
            eta * 0.5,
            np.where(f_col > f_row, eta * (1.0 - eps), eta * eps),
        )
        rows = np.broadcast_to(idx[..., :, None], value.shape)
        cols = np.broadcast_to(idx[..., None, :], value.shape)
        off = rows != cols
        c[rows[off], cols[off]] = value[off]
    # Summed left to right, as a plain loop over the row does (the eigenvector is ill-conditioned at small eps).
    c[np.arange(n), np.arange(n)] = 1.0 - np.cumsum(c, axis=1)[:, -1]
    return c


def stationary_distribution(c: np.ndarray) -> np.ndarray:
    """The unique stationary distribution of the row-stochastic ``c``; ValueError if it is not unique."""
    values, left, _ = scipy.linalg.eig(c, left=True, right=True)
    unit = np.abs(values - 1.0) < _UNIT_EIGENVALUE_TOL
    if int(unit.sum()) != 1:
        raise ValueError(f"expected 1 stationary distribution, found {int(unit.sum())}")
    vector = left[:, unit]
    vector = vector / vector.sum()
    return np.asarray(vector.real).flatten()


def sweep_pi_vs_epsilon(
    tables: Sequence[np.ndarray],
    *,
    min_iters: int = 10,
    max_iters: int = 100,
    min_epsilon: float = 1e-14,
    start_epsilon: float = 0.5,
) -> np.ndarray:
    """Infinite-α α-Rank's joint distribution over profiles (row-major), ε swept down to convergence."""
    tables = [np.asarray(t, dtype=np.float64) for t in tables]
    shape = tables[0].shape
    if len(tables) != len(shape) or any(t.shape != shape for t in tables):
        raise ValueError(f"alpharank needs one payoff table per population, each of shape {shape}")
    profiles = int(np.prod(shape))
    if profiles == 1:
        return np.ones(1)
    if profiles > MAX_PROFILES:
        raise ValueError(
            f"alpharank: the meta-game has {profiles} joint profiles; its Markov chain needs a dense "
            f"{profiles}x{profiles} eigen-decomposition, and at most {MAX_PROFILES} profiles are allowed"
        )
    eps, factor = start_epsilon, 0.5
    pi: np.ndarray | None = None
    history: dict[float, np.ndarray] = {}
    steps, succeeded = 0, False
    while True:
        try:
            previous = pi
            pi = stationary_distribution(_transition_matrix(tables, eps))
            history[eps] = pi
            if steps > min_iters and previous is not None and np.allclose(pi, previous):
                break
            eps *= factor
            steps += 1
            succeeded = True
            if steps >= max_iters:
                raise RuntimeError(
                    f"alpharank: no stationary distribution after {steps} steps of the epsilon sweep"
                )
        except ValueError as exc:
            if eps < min_epsilon:
                raise RuntimeError(
                    "alpharank: no stationary distribution and epsilon below its minimum"
                ) from exc
            eps /= factor
            if succeeded:
                factor = (factor + 1.0) / 2.0
                eps *= factor
    pi = history[min(history)]
    negative = pi < 0
    if negative.any():
        if pi[negative].min() < -1e-9:
            raise RuntimeError(f"alpharank: probabilities as low as {pi[negative].min():.3g}")
        pi = np.where(negative, 0.0, pi)
        pi = pi / pi.sum()
    return pi


def alpharank_marginals(tables: Sequence[np.ndarray], **sweep: float) -> list[np.ndarray]:
    """Each population's marginal of the swept α-Rank distribution (PSRO's meta-strategy)."""
    shape = np.asarray(tables[0]).shape
    joint = sweep_pi_vs_epsilon(tables, **sweep).reshape(shape)  # type: ignore[arg-type]
    axes = range(len(shape))
    return [joint.sum(axis=tuple(a for a in axes if a != k)) for k in axes]
