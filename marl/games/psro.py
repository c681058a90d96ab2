"""PSRO with an exact best-response oracle and exact meta-game payoffs.

Policy-Space Response Oracles (Lanctot, Zambaldi, Gruslys, Lazaridou, Tuyls,
Pérolat, Silver & Graepel, "A Unified Game-Theoretic Approach to Multiagent
Reinforcement Learning", NeurIPS 2017, arXiv 1711.00832), on the tensor trees
of :mod:`marl.games.tree`:

1. Each player ``p`` has a population ``Pi_p`` of behaviour policies (tensors
   ``[I_p, A]`` over ``p``'s information sets), initially the uniform policy.
2. The *meta-game* ``U[p][k_0, ..., k_{N-1}]`` is player ``p``'s expected
   utility when every player ``q`` plays member ``k_q`` of ``Pi_q``. It is
   computed exactly with :func:`~marl.games.evaluate.policy_value`, the new
   joint profiles of an iteration going through the batch dimension together.
3. Each iteration the *training* meta-solver maps the meta-game to a
   meta-strategy ``w_p`` (a distribution over ``Pi_p``) for every player; each
   player gets the exact (pure) best response to the others' mixtures
   (:func:`~marl.games.evaluate.best_response`), which is added to its
   population, and the meta-game is extended.
4. After each iteration the *evaluation* meta-solver's meta-strategy is turned
   into one behaviour policy per player and its exploitability (NashConv / N,
   :func:`~marl.games.evaluate.evaluate`) is recorded.

Mixtures. A mixture of behaviour policies of an extensive-form game is not the
behaviour policy with averaged action probabilities. By Kuhn's theorem, under
perfect recall the mixture ``sum_k w_k sigma_k`` is realisation-equivalent to
the behaviour policy

    sigma(I, a) = sum_k w_k x_k(I) sigma_k(I, a) / sum_k w_k x_k(I),

where ``x_k(I)`` is the probability that ``sigma_k``'s own actions lead to
information set ``I`` (its own reach). Both induce the same distribution over
terminal histories against any opponents, hence the same values; the others'
independent mixtures can therefore be replaced by these behaviour policies
when computing best responses and exploitability
(:func:`mixture_behaviour_policy`). At information sets that no weighted
member reaches the plain weighted average is used (any choice is equivalent).

Meta-solvers (``uniform``, ``nash``, ``prd``, ``rm``, ``shor-train``,
``shor-eval``) live in :mod:`marl.games.metasolvers`; SHOR-PSRO is from Li,
Schultz, Hennes & Lanctot, arXiv 2602.16928, which uses this protocol (exact
best responses, exact payoffs, separate training and evaluation solvers).
Differences from that paper's harness: the oracle returns a pure best response
(argmax, first action on ties) rather than randomising uniformly among tied
actions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .evaluate import best_response, evaluate, policy_value
from .metasolvers import MetaSolver, get_meta_solver
from .tree import DECISION, GameTree, load_game

__all__ = [
    "MetaGame", "PSROResult", "infoset_own_reach", "joint_policy",
    "mixture_behaviour_policy", "mixture_player_policy", "run_psro",
]


# ------------------------------------------------------------------ mixtures --


def _parent_sequences(tree: GameTree, player: int):
    """For ``player``'s information sets (local indices), grouped by own depth:
    the information set and action slot of the player's previous own decision
    (perfect recall makes it unique). Returns per own depth ``d >= 1`` the
    tensors ``(infosets, parent infosets, parent slots)``."""
    key = ("psro_parent_sequences", player)
    hit = tree.derived.get(key)
    if hit is not None:
        return hit
    arr = tree.arrays
    sl = tree.infoset_slices[player]
    dec = np.nonzero(arr.kind == DECISION)[0]
    rep = np.full(tree.num_infosets, -1, dtype=np.int64)
    rep[arr.infoset[dec]] = dec
    cur = rep[sl].copy()
    n = len(cur)
    par_is = np.full(n, -1, dtype=np.int64)
    par_slot = np.full(n, -1, dtype=np.int64)
    open_ = np.ones(n, dtype=bool)
    while open_.any():
        par = arr.parent[cur]
        at_root = open_ & (par < 0)
        open_ &= ~at_root
        safe = np.maximum(par, 0)
        found = open_ & (arr.kind[safe] == DECISION) & (arr.player[safe] == player)
        par_is[found] = arr.infoset[safe[found]] - sl.start
        par_slot[found] = arr.slot[cur[found]]
        open_ &= ~found
        cur = np.where(open_, par, cur)
    own = arr.own_depth[sl]
    levels = []
    def t(x):
        return torch.as_tensor(x, device=tree.device)

    for d in range(1, int(own.max()) + 1 if n else 1):
        sel = np.nonzero(own == d)[0]
        levels.append((t(sel), t(par_is[sel]), t(par_slot[sel])))
    if n and ((own > 0) != (par_is >= 0)).any():
        raise AssertionError("own depth and parent sequences disagree")
    tree.derived[key] = levels
    return levels


def infoset_own_reach(tree: GameTree, player: int, members: torch.Tensor) -> torch.Tensor:
    """``[K, I_p]``: the probability ``x_k(I)`` that member ``k``'s own actions
    lead to each of ``player``'s information sets (``members``: ``[K, I_p, A]``),
    from the sequence structure: ``x(I) = x(J) * sigma(J, a)`` for the
    player's previous own decision ``(J, a)``, 1 where there is none."""
    if members.dim() == 2:
        members = members.unsqueeze(0)
    members = members.to(tree.device, tree.dtype)
    x = torch.ones(members.shape[:2], dtype=tree.dtype, device=tree.device)
    for isets, par, slot in _parent_sequences(tree, player):
        x[:, isets] = x[:, par] * members[:, par, slot]
    return x


def mixture_player_policy(tree: GameTree, player: int, members: torch.Tensor,
                          weights: Sequence[float] | np.ndarray | torch.Tensor) -> torch.Tensor:
    """``[I_p, A]``: the behaviour policy realisation-equivalent to the mixture
    of ``members`` (``[K, I_p, A]``) with ``weights`` (``[K]``)."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64), dtype=tree.dtype,
                        device=tree.device)
    members = members.to(tree.device, tree.dtype)
    if w.shape[0] != members.shape[0]:
        raise ValueError(f"{members.shape[0]} members but {w.shape[0]} weights")
    keep = w > 0
    if not bool(keep.any()):
        raise ValueError("mixture weights are all zero")
    w, members = w[keep], members[keep]
    if members.shape[0] == 1:
        return members[0].clone()
    x = infoset_own_reach(tree, player, members) * w[:, None]      # [K, I_p]
    num = (x[:, :, None] * members).sum(0)                         # [I_p, A]
    den = x.sum(0)                                                 # [I_p]
    plain = (w[:, None, None] * members).sum(0) / w.sum()
    ok = den > 0
    safe = torch.where(ok, den, torch.ones_like(den))
    return torch.where(ok[:, None], num / safe[:, None], plain)


def joint_policy(tree: GameTree, parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[1, I, A]`` from one ``[I_p, A]`` policy per player."""
    out = torch.zeros(1, tree.num_infosets, tree.max_actions, dtype=tree.dtype,
                      device=tree.device)
    for p, part in enumerate(parts):
        out[0, tree.infoset_slices[p]] = part.to(tree.device, tree.dtype)
    return out


def mixture_behaviour_policy(tree: GameTree, populations: Sequence[torch.Tensor],
                             meta_strategy: Sequence[np.ndarray]) -> torch.Tensor:
    """``[1, I, A]``: every player's meta-strategy mixture of its population
    as one realisation-equivalent behaviour policy."""
    return joint_policy(tree, [mixture_player_policy(tree, p, populations[p], meta_strategy[p])
                               for p in range(tree.num_players)])


# ----------------------------------------------------------------- meta-game --

class MetaGame:
    """Populations and their exact meta-game payoff tensor.

    ``populations[p]`` is ``[n_p, I_p, A]``; ``payoffs`` is ``[N, n_0, ...,
    n_{N-1}]`` (``payoffs[p]`` is player ``p``'s tensor)."""

    def __init__(self, tree: GameTree, initial: Sequence[torch.Tensor] | None = None,
                 memory_budget: float = 2.5e8):
        self.tree = tree
        self.N = tree.num_players
        self.memory_budget = memory_budget
        if initial is None:
            uni = tree.uniform_policy(1)[0]
            initial = [uni[tree.infoset_slices[p]] for p in range(self.N)]
        self.populations = [p_.to(tree.device, tree.dtype).unsqueeze(0) if p_.dim() == 2
                            else p_.to(tree.device, tree.dtype) for p_ in initial]
        self.payoffs = np.zeros((self.N,) + (0,) * self.N)
        self.profiles_evaluated = 0
        self._fill(tuple(0 for _ in range(self.N)))

    @property
    def sizes(self) -> list[int]:
        return [int(p.shape[0]) for p in self.populations]

    @property
    def meta_games(self) -> list[np.ndarray]:
        return [self.payoffs[p] for p in range(self.N)]

    def add(self, new_policies: Sequence[torch.Tensor | None]) -> None:
        """Append one policy ``[I_p, A]`` per player (``None``: no new member)
        and compute the payoffs of every new joint profile."""
        old = self.sizes
        for p, pol in enumerate(new_policies):
            if pol is not None:
                pol = pol.to(self.tree.device, self.tree.dtype)
                self.populations[p] = torch.cat([self.populations[p], pol.unsqueeze(0)], 0)
        self._fill(tuple(old))

    def _fill(self, old_sizes: tuple[int, ...]) -> None:
        tree, N = self.tree, self.N
        new_sizes = tuple(self.sizes)
        grown = np.zeros((N,) + new_sizes)
        if self.payoffs.size:
            grown[(slice(None),) + tuple(slice(0, s) for s in old_sizes)] = self.payoffs
        self.payoffs = grown
        grid = np.indices(new_sizes).reshape(N, -1).T                  # [M, N]
        is_new = (grid >= np.asarray(old_sizes)[None, :]).any(1)
        todo = grid[is_new]
        if len(todo) == 0:
            return
        per = tree.num_nodes * (N + 4) * np.dtype(np.float64).itemsize
        chunk = max(1, int(self.memory_budget // per))
        for lo in range(0, len(todo), chunk):
            idx = todo[lo:lo + chunk]
            sel = torch.as_tensor(idx, device=tree.device)
            pol = torch.cat([self.populations[p][sel[:, p]] for p in range(N)], dim=1)
            vals = policy_value(tree, pol).cpu().numpy()               # [b, N]
            self.payoffs[(slice(None),) + tuple(idx.T)] = vals.T
        self.profiles_evaluated += len(todo)

    def profile_policy(self, profile: Sequence[int]) -> torch.Tensor:
        """``[1, I, A]`` of the joint pure profile ``profile``."""
        return joint_policy(self.tree, [self.populations[p][k] for p, k in enumerate(profile)])


# --------------------------------------------------------------------- PSRO --

@dataclass
class PSROResult:
    game: str
    train_solver: str
    eval_solver: str
    iterations: int
    exploitability: list[float]          # [K+1]; entry 0: the initial population
    nash_conv: list[float]               # [K+1]
    population_sizes: list[list[int]]    # [K+1][N]
    meta_strategies: list[list[np.ndarray]]        # evaluation meta-strategies, [K+1][N]
    train_meta_strategies: list[list[np.ndarray]]  # the ones the BRs answered, [K][N]
    wall_time: float
    iteration_times: list[float]
    timings: dict[str, float]
    meta_games: list[np.ndarray]         # final payoff tensors
    populations: list[torch.Tensor]      # final populations, [n_p, I_p, A]
    policy: torch.Tensor                 # final evaluation behaviour policy [1, I, A]
    device: str
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return (f"PSRO {self.game} train={self.train_solver} eval={self.eval_solver} "
                f"K={self.iterations}: exploitability {self.exploitability[0]:.4g} -> "
                f"{self.exploitability[-1]:.4g}, population {self.population_sizes[-1]}, "
                f"{self.wall_time:.1f}s")


def _solver_name(solver: Any) -> str:
    return solver if isinstance(solver, str) else getattr(solver, "name", type(solver).__name__)


def run_psro(game: str | GameTree, iterations: int, train_solver: str | MetaSolver = "uniform",
             eval_solver: str | MetaSolver | None = None, device: str = "auto", seed: int = 0,
             train_kwargs: dict | None = None, eval_kwargs: dict | None = None,
             verbose: bool = False) -> PSROResult:
    """Run ``iterations`` PSRO iterations on ``game``.

    ``train_solver`` picks the meta-strategy the best responses answer;
    ``eval_solver`` (default: the training solver) the one whose
    exploitability is reported after each iteration. Either is a registered
    name (:func:`~marl.games.metasolvers.meta_solver_names`) or an object with
    ``get_meta_strategy``. Everything is deterministic (``seed`` seeds torch
    and numpy for custom solvers that draw random numbers)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    t_start = time.perf_counter()
    tree = game if isinstance(game, GameTree) else load_game(game, device)
    train_name = _solver_name(train_solver)
    train = get_meta_solver(train_solver, **(train_kwargs or {}))
    if eval_solver is None or (isinstance(eval_solver, str) and eval_solver == train_name
                               and not eval_kwargs):
        evals = train if getattr(train, "stateless", False) else get_meta_solver(
            train_name if isinstance(train_solver, str) else train_solver, **(train_kwargs or {}))
        eval_name = train_name
    else:
        evals = get_meta_solver(eval_solver, **(eval_kwargs or {}))
        eval_name = _solver_name(eval_solver)
    # A stateless solver used for both roles: the evaluation meta-strategy of
    # a meta-game is also the next training meta-strategy.
    reuse = evals is train and getattr(train, "stateless", False)

    timings = {"meta_solver_train": 0.0, "meta_solver_eval": 0.0, "best_response": 0.0,
               "meta_game": 0.0, "evaluate": 0.0}
    N = tree.num_players
    t0 = time.perf_counter()
    mg = MetaGame(tree)
    timings["meta_game"] += time.perf_counter() - t0

    def eval_point():
        t = time.perf_counter()
        ms = [np.asarray(s, dtype=np.float64) for s in
              evals.get_meta_strategy(mg.meta_games, iteration=len(sizes) - 1,
                                      populations=mg.populations)]
        timings["meta_solver_eval"] += time.perf_counter() - t
        t = time.perf_counter()
        pol = mixture_behaviour_policy(tree, mg.populations, ms)
        ev = evaluate(tree, pol)
        timings["evaluate"] += time.perf_counter() - t
        return ms, pol, float(ev.exploitability[0]), float(ev.nash_conv[0])

    sizes: list[list[int]] = [mg.sizes]
    ms, pol, ex, nc = eval_point()
    expl, ncs, metas, train_metas, it_times = [ex], [nc], [ms], [], []
    last_eval = ms
    for k in range(1, iterations + 1):
        t_it = time.perf_counter()
        if reuse:
            tms = last_eval
        else:
            t = time.perf_counter()
            tms = [np.asarray(s, dtype=np.float64) for s in
                   train.get_meta_strategy(mg.meta_games, iteration=k,
                                           populations=mg.populations)]
            timings["meta_solver_train"] += time.perf_counter() - t
        train_metas.append(tms)
        t = time.perf_counter()
        mix = mixture_behaviour_policy(tree, mg.populations, tms)
        brs = [best_response(tree, mix, p).policy[0] for p in range(N)]
        timings["best_response"] += time.perf_counter() - t
        t = time.perf_counter()
        mg.add(brs)
        timings["meta_game"] += time.perf_counter() - t
        sizes.append(mg.sizes)
        ms, pol, ex, nc = eval_point()
        last_eval = ms
        expl.append(ex)
        ncs.append(nc)
        metas.append(ms)
        it_times.append(time.perf_counter() - t_it)
        if verbose:
            print(f"[psro {tree.game} {train_name}/{eval_name}] it {k}: "
                  f"exploitability {ex:.6g} pop {mg.sizes} ({it_times[-1]:.2f}s)", flush=True)
    return PSROResult(
        game=tree.game, train_solver=train_name, eval_solver=eval_name, iterations=iterations,
        exploitability=expl, nash_conv=ncs, population_sizes=sizes, meta_strategies=metas,
        train_meta_strategies=train_metas, wall_time=time.perf_counter() - t_start,
        iteration_times=it_times, timings=timings, meta_games=mg.meta_games,
        populations=mg.populations, policy=pol, device=str(tree.device), seed=seed,
        extra={"profiles_evaluated": mg.profiles_evaluated})
