"""PSRO with an exact best-response oracle and exact meta-game payoffs.

Policy-Space Response Oracles (Lanctot, Zambaldi, Gruslys, Lazaridou, Tuyls,
Pérolat, Silver & Graepel, "A Unified Game-Theoretic Approach to Multiagent
Reinforcement Learning", NeurIPS 2017, arXiv 1711.00832), on the tensor trees
of :mod:`societas.marl.games.tree`:

1. Each player ``p`` has a population ``Pi_p`` of behaviour policies (tensors
   ``[I_p, A]`` over ``p``'s information sets), initially the uniform policy.
2. The *meta-game* ``U[p][k_0, ..., k_{N-1}]`` is player ``p``'s expected
   utility when every player ``q`` plays member ``k_q`` of ``Pi_q``. It is
   exact: a profile's value factorises over terminal histories into chance
   reach times each member's own reach times utility, so the new profiles of
   an iteration are a few tensor contractions (:class:`MetaGame`) rather than
   one tree evaluation per profile.
3. Each iteration the *training* meta-solver maps the meta-game to a
   meta-strategy ``w_p`` (a distribution over ``Pi_p``) for every player; each
   player gets the exact (pure) best response to the others' mixtures
   (:func:`~societas.marl.games.evaluate.best_response`), which is added to its
   population, and the meta-game is extended.
4. After each iteration the *evaluation* meta-solver's meta-strategy is turned
   into one behaviour policy per player and its exploitability (NashConv / N,
   :func:`~societas.marl.games.evaluate.evaluate`) is recorded.

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
``shor-eval``) live in :mod:`societas.marl.games.metasolvers`; SHOR-PSRO is from Li,
Schultz, Hennes & Lanctot, arXiv 2602.16928, which uses this protocol (exact
best responses, exact payoffs, separate training and evaluation solvers).
The oracle's best response mixes uniformly over tied best actions, as the
paper's harness does (``br_ties="first"`` takes the first of them instead,
OpenSpiel's ``BestResponsePolicy`` rule).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .evaluate import TIES, best_response, evaluate
from .metasolvers import MetaSolver, get_meta_solver
from .tree import CHANCE, DECISION, GameTree, load_game

__all__ = [
    "MetaGame",
    "PSROResult",
    "infoset_own_reach",
    "joint_policy",
    "mixture_behaviour_policy",
    "mixture_player_policy",
    "run_psro",
    "terminal_own_reach",
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


def mixture_player_policy(
    tree: GameTree, player: int, members: torch.Tensor, weights: Sequence[float] | np.ndarray | torch.Tensor
) -> torch.Tensor:
    """``[I_p, A]``: the behaviour policy realisation-equivalent to the mixture
    of ``members`` (``[K, I_p, A]``) with ``weights`` (``[K]``)."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64), dtype=tree.dtype, device=tree.device)
    members = members.to(tree.device, tree.dtype)
    if w.shape[0] != members.shape[0]:
        raise ValueError(f"{members.shape[0]} members but {w.shape[0]} weights")
    keep = w > 0
    if not bool(keep.any()):
        raise ValueError("mixture weights are all zero")
    w, members = w[keep], members[keep]
    if members.shape[0] == 1:
        return members[0].clone()
    x = infoset_own_reach(tree, player, members) * w[:, None]  # [K, I_p]
    num = (x[:, :, None] * members).sum(0)  # [I_p, A]
    den = x.sum(0)  # [I_p]
    plain = (w[:, None, None] * members).sum(0) / w.sum()
    ok = den > 0
    safe = torch.where(ok, den, torch.ones_like(den))
    return torch.where(ok[:, None], num / safe[:, None], plain)


def joint_policy(tree: GameTree, parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[1, I, A]`` from one ``[I_p, A]`` policy per player."""
    out = torch.zeros(1, tree.num_infosets, tree.max_actions, dtype=tree.dtype, device=tree.device)
    for p, part in enumerate(parts):
        out[0, tree.infoset_slices[p]] = part.to(tree.device, tree.dtype)
    return out


def mixture_behaviour_policy(
    tree: GameTree, populations: Sequence[torch.Tensor], meta_strategy: Sequence[np.ndarray]
) -> torch.Tensor:
    """``[1, I, A]``: every player's meta-strategy mixture of its population
    as one realisation-equivalent behaviour policy."""
    return joint_policy(
        tree,
        [mixture_player_policy(tree, p, populations[p], meta_strategy[p]) for p in range(tree.num_players)],
    )


# ----------------------------------------------------------------- meta-game --


def _terminal_structure(tree: GameTree):
    """Per terminal history: the chance reach ``c(z)`` (``[T]``) and, for each
    player, the information set (local index) and action slot of the player's
    last own decision on the path to ``z`` (``-1`` where it has none). Cached."""
    key = "psro_terminal_structure"
    hit = tree.derived.get(key)
    if hit is not None:
        return hit
    arr = tree.arrays
    N = tree.num_players
    H = len(arr.parent)
    creach = np.ones(H)
    last_is = np.full((N, H), -1, dtype=np.int64)
    last_slot = np.full((N, H), -1, dtype=np.int64)
    order = np.argsort(arr.depth, kind="stable")
    depth_sorted = arr.depth[order]
    bounds = np.searchsorted(depth_sorted, np.arange(int(arr.depth.max()) + 2))
    for d in range(1, len(bounds) - 1):
        nodes = order[bounds[d] : bounds[d + 1]]
        if len(nodes) == 0:
            continue
        par = arr.parent[nodes]
        pk = arr.kind[par]
        creach[nodes] = creach[par] * np.where(pk == CHANCE, arr.chance_prob[nodes], 1.0)
        last_is[:, nodes] = last_is[:, par]
        last_slot[:, nodes] = last_slot[:, par]
        dec = pk == DECISION
        for p in range(N):
            mine = dec & (arr.player[par] == p)
            tgt = nodes[mine]
            last_is[p, tgt] = arr.infoset[par[mine]] - tree.infoset_slices[p].start
            last_slot[p, tgt] = arr.slot[tgt]
    z = arr.terminals

    def t(x, dtype=None):
        return torch.as_tensor(x, device=tree.device, dtype=dtype)

    out = (t(creach[z], tree.dtype), [(t(last_is[p, z]), t(last_slot[p, z])) for p in range(N)])
    tree.derived[key] = out
    return out


def terminal_own_reach(tree: GameTree, player: int, members: torch.Tensor) -> torch.Tensor:
    """``[K, T]``: the probability that member ``k``'s own actions lead to each
    terminal history (in the order of ``tree.terminals``): its own reach of the
    player's last information set on the path times that action's
    probability, 1 where the player never acts."""
    if members.dim() == 2:
        members = members.unsqueeze(0)
    members = members.to(tree.device, tree.dtype)
    _, last = _terminal_structure(tree)
    isets, slots = last[player]
    x_is = infoset_own_reach(tree, player, members)  # [K, I_p]
    acts = isets >= 0
    safe_is = torch.where(acts, isets, torch.zeros_like(isets))
    safe_slot = torch.where(acts, slots, torch.zeros_like(slots))
    if x_is.shape[1] == 0:
        return torch.ones(members.shape[0], len(isets), dtype=tree.dtype, device=tree.device)
    reach = x_is[:, safe_is] * members[:, safe_is, safe_slot]
    return torch.where(acts[None, :], reach, torch.ones_like(reach))


class MetaGame:
    """Populations and their exact meta-game payoff tensor.

    ``populations[p]`` is ``[n_p, I_p, A]``; ``payoffs`` is ``[N, n_0, ...,
    n_{N-1}]`` (``payoffs[p]`` is player ``p``'s tensor).

    The payoffs are not computed one joint profile at a time. A profile's
    value is a sum over terminal histories ``z`` of chance reach times each
    player's own reach times utility,

        U[n][k_0, ..., k_{N-1}] = sum_z c(z) u_n(z) prod_p x_p[k_p, z],

    so with each member's terminal own reach ``x_p[k, :]`` (computed once,
    :func:`terminal_own_reach`) the whole tensor is one contraction over
    ``z``. Growing the populations fills only the new profiles, as one slab
    per player (``k_p`` new, earlier players old, later players any), each a
    single ``einsum``."""

    def __init__(
        self,
        tree: GameTree,
        initial: Sequence[torch.Tensor] | None = None,
        capacity: int | None = None,
        memory_budget: float = 5e8,
    ):
        self.tree = tree
        self.N = tree.num_players
        self.memory_budget = memory_budget
        if initial is None:
            uni = tree.uniform_policy(1)[0]
            initial = [uni[tree.infoset_slices[p]] for p in range(self.N)]
        self.populations = [
            p_.to(tree.device, tree.dtype).unsqueeze(0) if p_.dim() == 2 else p_.to(tree.device, tree.dtype)
            for p_ in initial
        ]
        creach, _ = _terminal_structure(tree)
        self._weights = (creach[:, None] * tree.utility).T.contiguous()  # [N, T]
        self._reach = [terminal_own_reach(tree, p, self.populations[p]) for p in range(self.N)]
        # Payoffs live in a buffer with room for ``capacity`` members per
        # player (run_psro knows the final size), so growing never copies it.
        self._buf = np.zeros((self.N,) + tuple(max(n, capacity or 0) for n in self.sizes))
        self.profiles_evaluated = 0
        self._fill(tuple(0 for _ in range(self.N)))

    @property
    def sizes(self) -> list[int]:
        return [int(p.shape[0]) for p in self.populations]

    @property
    def payoffs(self) -> np.ndarray:
        """``[N, n_0, ..., n_{N-1}]`` (a view of the buffer)."""
        return self._buf[(slice(None),) + tuple(slice(0, n) for n in self.sizes)]

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
                self._reach[p] = torch.cat([self._reach[p], terminal_own_reach(self.tree, p, pol)], 0)
        self._fill(tuple(old))

    def _fill(self, old_sizes: tuple[int, ...]) -> None:
        N = self.N
        new_sizes = tuple(self.sizes)
        if any(n > c for n, c in zip(new_sizes, self._buf.shape[1:])):
            cap = tuple(max(n, 2 * c) for n, c in zip(new_sizes, self._buf.shape[1:]))
            grown = np.zeros((N,) + cap)
            grown[(slice(None),) + tuple(slice(0, s) for s in old_sizes)] = self._buf[
                (slice(None),) + tuple(slice(0, s) for s in old_sizes)
            ]
            self._buf = grown
        for p in range(N):
            if new_sizes[p] == old_sizes[p]:
                continue
            ranges = [
                slice(0, old_sizes[q])
                if q < p
                else slice(old_sizes[p], new_sizes[p])
                if q == p
                else slice(0, new_sizes[q])
                for q in range(N)
            ]
            if any(r.stop <= r.start for r in ranges):
                continue
            slab = self._contract([self._reach[q][r] for q, r in enumerate(ranges)])
            self._buf[(slice(None),) + tuple(ranges)] = slab.cpu().numpy()
            self.profiles_evaluated += int(np.prod([r.stop - r.start for r in ranges]))

    def _contract(self, reaches: list[torch.Tensor]) -> torch.Tensor:
        """``sum_z W[n, z] prod_q X_q[k_q, z]`` -> ``[N, k_0, ..., k_{N-1}]``,
        over chunks of terminals so the intermediate stays within budget: the
        last player's factor is a matrix product, the others broadcast."""
        N = self.N
        weights = self._weights
        # A best response is pure: its own reach is zero on most terminals,
        # and only the terminals where every single-member factor is nonzero
        # contribute to the slab.
        singles = [x[0] != 0 for x in reaches if x.shape[0] == 1]
        if singles:
            support = torch.stack(singles).all(0).nonzero().squeeze(1)
            if len(support) < 0.75 * weights.shape[1]:
                weights = weights[:, support]
                reaches = [x[:, support] for x in reaches]
        T = weights.shape[1]
        # the largest factor goes last, into the matrix product
        last = int(np.argmax([x.shape[0] for x in reaches]))
        order = [q for q in range(N) if q != last] + [last]
        reaches = [reaches[q] for q in order]
        sizes = [x.shape[0] for x in reaches]
        head = N * int(np.prod(sizes[:-1]))
        chunk = max(1, min(T, int(self.memory_budget // (8 * max(head, 1)))))
        out = torch.zeros(
            (N, int(np.prod(sizes[:-1])), sizes[-1]), dtype=weights.dtype, device=weights.device
        )
        for lo in range(0, T, chunk):
            hi = min(T, lo + chunk)
            m = weights[:, lo:hi]  # [N, z]
            for x in reaches[:-1]:
                m = m.unsqueeze(-2) * x[:, lo:hi]  # [N, ..., k, z]
            m = m.reshape(N, -1, hi - lo)
            out += m @ reaches[-1][:, lo:hi].T
        inverse = [order.index(q) for q in range(N)]
        return out.reshape([N] + sizes).permute([0] + [1 + i for i in inverse])

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
    exploitability: list[float]  # [K+1]; entry 0: the initial population
    nash_conv: list[float]  # [K+1]
    population_sizes: list[list[int]]  # [K+1][N]
    meta_strategies: list[list[np.ndarray]]  # evaluation meta-strategies, [K+1][N]
    train_meta_strategies: list[list[np.ndarray]]  # the ones the BRs answered, [K][N]
    wall_time: float
    iteration_times: list[float]
    timings: dict[str, float]
    meta_games: list[np.ndarray]  # final payoff tensors
    populations: list[torch.Tensor]  # final populations, [n_p, I_p, A]
    policy: torch.Tensor  # final evaluation behaviour policy [1, I, A]
    device: str
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"PSRO {self.game} train={self.train_solver} eval={self.eval_solver} "
            f"K={self.iterations}: exploitability {self.exploitability[0]:.4g} -> "
            f"{self.exploitability[-1]:.4g}, population {self.population_sizes[-1]}, "
            f"{self.wall_time:.1f}s"
        )


def _solver_name(solver: Any) -> str:
    return solver if isinstance(solver, str) else getattr(solver, "name", type(solver).__name__)


def run_psro(
    game: str | GameTree,
    iterations: int,
    train_solver: str | MetaSolver = "uniform",
    eval_solver: str | MetaSolver | None = None,
    device: str = "auto",
    seed: int = 0,
    train_kwargs: dict | None = None,
    eval_kwargs: dict | None = None,
    verbose: bool = False,
    on_iteration: Callable[[int, float], None] | None = None,
    br_ties: str = "uniform",
) -> PSROResult:
    """Run ``iterations`` PSRO iterations on ``game``.

    ``br_ties`` is the best-response oracle's rule where several actions are
    best (:func:`~societas.marl.games.evaluate.best_response`): ``"uniform"``
    (the paper's) or ``"first"``.

    ``on_iteration(k, exploitability)`` is called after iteration ``k`` (for
    progress displays).

    ``train_solver`` picks the meta-strategy the best responses answer;
    ``eval_solver`` (default: the training solver) the one whose
    exploitability is reported after each iteration. Either is a registered
    name (:func:`~societas.marl.games.metasolvers.meta_solver_names`) or an object with
    ``get_meta_strategy``. Everything is deterministic (``seed`` seeds torch
    and numpy for custom solvers that draw random numbers)."""
    if br_ties not in TIES:
        raise ValueError(f"br_ties must be one of {', '.join(TIES)}, got {br_ties!r}")
    torch.manual_seed(seed)
    np.random.seed(seed)
    t_start = time.perf_counter()
    tree = game if isinstance(game, GameTree) else load_game(game, device)
    train_name = _solver_name(train_solver)
    train = get_meta_solver(train_solver, **(train_kwargs or {}))
    if eval_solver is None or (
        isinstance(eval_solver, str) and eval_solver == train_name and not eval_kwargs
    ):
        evals = (
            train
            if getattr(train, "stateless", False)
            else get_meta_solver(
                train_name if isinstance(train_solver, str) else train_solver, **(train_kwargs or {})
            )
        )
        eval_name = train_name
    else:
        evals = get_meta_solver(eval_solver, **(eval_kwargs or {}))
        eval_name = _solver_name(eval_solver)
    # A stateless solver used for both roles: the evaluation meta-strategy of
    # a meta-game is also the next training meta-strategy.
    reuse = evals is train and getattr(train, "stateless", False)

    timings = {
        "meta_solver_train": 0.0,
        "meta_solver_eval": 0.0,
        "best_response": 0.0,
        "meta_game": 0.0,
        "evaluate": 0.0,
    }
    N = tree.num_players
    t0 = time.perf_counter()
    mg = MetaGame(tree, capacity=iterations + 1)
    timings["meta_game"] += time.perf_counter() - t0

    def eval_point():
        t = time.perf_counter()
        ms = [
            np.asarray(s, dtype=np.float64)
            for s in evals.get_meta_strategy(
                mg.meta_games, iteration=len(sizes) - 1, populations=mg.populations
            )
        ]
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
            tms = [
                np.asarray(s, dtype=np.float64)
                for s in train.get_meta_strategy(mg.meta_games, iteration=k, populations=mg.populations)
            ]
            timings["meta_solver_train"] += time.perf_counter() - t
        train_metas.append(tms)
        t = time.perf_counter()
        mix = mixture_behaviour_policy(tree, mg.populations, tms)
        brs = [best_response(tree, mix, p, ties=br_ties).policy[0] for p in range(N)]
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
        if on_iteration is not None:
            on_iteration(k, ex)
        if verbose:
            print(
                f"[psro {tree.game} {train_name}/{eval_name}] it {k}: "
                f"exploitability {ex:.6g} pop {mg.sizes} ({it_times[-1]:.2f}s)",
                flush=True,
            )
    return PSROResult(
        game=tree.game,
        train_solver=train_name,
        eval_solver=eval_name,
        iterations=iterations,
        exploitability=expl,
        nash_conv=ncs,
        population_sizes=sizes,
        meta_strategies=metas,
        train_meta_strategies=train_metas,
        wall_time=time.perf_counter() - t_start,
        iteration_times=it_times,
        timings=timings,
        meta_games=mg.meta_games,
        populations=mg.populations,
        policy=pol,
        device=str(tree.device),
        seed=seed,
        extra={"profiles_evaluated": mg.profiles_evaluated},
    )
