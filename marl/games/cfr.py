"""One counterfactual-regret-minimisation solver, parameterised by three hooks.

This is the structure that "Discovering Multiagent Learning Algorithms with
Large Language Models" (Li, Schultz, Hennes, Lanctot; arXiv 2602.16928)
evolves, written over tensors so that a hook sees *all* information sets of a
player at once (``[B, I_p, A]``: ``B`` variants, ``I_p`` information sets,
``A`` action slots; padding slots are masked by ``ctx.legal``):

1. **regret accumulation** ``R_t = regret.update(R_{t-1}, r_t, ctx)`` from the
   instantaneous counterfactual regrets
   ``r_t(I, a) = sum_{h in I} pi_{-i}(h) (v_i(h a) - v_i(h))``;
2. **current policy** ``sigma_{t+1} = policy.update(R_t, sigma_t, ctx)``;
3. **policy accumulation** ``S_t = average.update(S_{t-1}, sigma_t, x_t, y_t, ctx)``
   from the player's own reach ``x_t(I) = sum_{h in I} pi_i(h)`` and the
   counterfactual reach ``y_t(I) = sum_{h in I} pi_{-i}(h)``.

The output (average) policy is ``S_T`` normalised per information set.
Hooks are objects made once per player by a factory; they may keep state
between iterations (in ``self`` or in ``ctx.shared``, a dict common to the
three hooks of one player).

Update schedule: with ``alternating=True`` (the default, as OpenSpiel's
``CFRSolver``) iteration ``t`` updates player 0, then player 1 against
player 0's new policy, and so on; with ``alternating=False`` all players
update together from the same profile; then an algorithm whose hooks treat
each information set on its own (``Algorithm.per_infoset``: the classic
variants) runs one set of hooks over all players' information sets at once,
with the same numbers bit for bit. The iteration number ``t`` starts at 1.
Plain CFR with these defaults reproduces OpenSpiel's ``CFRSolver`` number for
number (Zinkevich et al., 2007).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .algorithms import get_algorithm
from .evaluate import Exploitability, evaluate
from .hooks import Algorithm, AverageHook, HookContext, PolicyHook, RegretHook, legal_weights
from .tree import DECISION, TERMINAL, GameTree, load_game

# ----------------------------------------------------------------- solver ----

# Simultaneous updates sweep the tree once for all players (bitwise the same
# numbers as one sweep per player) while histories x players x batch stay under
# this: on small trees the per-operation overhead dominates and one sweep saves
# half of it; on large ones the wider rows fall out of the caches and separate
# sweeps are faster (3-player Leduc, B=1: twice as fast).
JOINT_MAX = 1 << 20


@dataclass
class PlayerState:
    cum_regret: torch.Tensor
    cum_policy: torch.Tensor
    regret: RegretHook
    policy_hook: PolicyHook
    average: AverageHook
    shared: dict


class CFRSolver:
    """Run a CFR variant on a tensor tree, ``B`` variants at once.

    ``algorithm`` is an :class:`Algorithm` or the name of a built-in one
    (see :func:`societas.marl.games.algorithms.get_algorithm`); ``batch`` is the number
    of variants, which the hooks tell apart through per-variant parameters.
    """

    def __init__(
        self,
        game: GameTree | str,
        algorithm: Algorithm | str = "cfr",
        *,
        batch: int = 1,
        alternating: bool | None = None,
        device: str | torch.device = "auto",
    ):
        self.tree = load_game(game, device) if isinstance(game, str) else game
        self.algorithm = get_algorithm(algorithm) if isinstance(algorithm, str) else algorithm
        if alternating is not None:
            self.algorithm = self.algorithm.with_schedule(alternating)
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.batch = batch
        self.iteration = 0
        tree = self.tree
        self.policy = tree.uniform_policy(batch)  # current policy [B, I, A]
        self.players = [self._fresh_state(sl.stop - sl.start) for sl in tree.infoset_slices]
        # A per-infoset algorithm under simultaneous updates runs one set of hooks over every player's
        # information sets at once (half the operations on two players; the same numbers).
        self._shared: PlayerState | None = None
        slices = tree.infoset_slices
        contiguous = slices[0].start == 0 and all(a.stop == b.start for a, b in zip(slices, slices[1:]))
        joint = self._fits_one_sweep = tree.num_nodes * tree.num_players * batch <= JOINT_MAX
        if self.algorithm.per_infoset and not self.algorithm.alternating and contiguous and joint:
            self._shared = self._fresh_state(tree.num_infosets)
            self._legal_w = legal_weights(tree.legal_mask, tree.dtype)
        self._table = tree.prob_table(self.policy)  # [R, B], kept in sync
        self._workspace()
        self._plan = [self._make_plan(p) for p in range(tree.num_players)]
        # The one-sweep plan of simultaneous updates, built here (not in the first step, where it
        # would cost several iterations' time) when the schedule asks for it, else on first use.
        self._joint: dict | None = None
        if not self.algorithm.alternating and joint:
            self._joint = self._make_joint_plan()

    # ------------------------------------------------------------ internals
    def _fresh_state(self, infosets: int) -> PlayerState:
        """Zero cumulative regrets and policies over ``infosets`` information sets, and new hooks."""
        tree = self.tree
        zeros = torch.zeros((self.batch, infosets, tree.max_actions), dtype=tree.dtype, device=tree.device)
        return PlayerState(
            cum_regret=zeros.clone(),
            cum_policy=zeros.clone(),
            regret=self.algorithm.regret(),
            policy_hook=self.algorithm.policy(),
            average=self.algorithm.average(),
            shared={},
        )

    def _make_plan(self, p: int) -> dict:
        """Index tensors and pre-sliced workspace views for player p's sweeps
        (index layouts: :meth:`_indexers`).

        Slicing is done here once: inside the loop it would cost more than the
        arithmetic on Leduc-sized trees.
        """
        tree = self.tree
        B = self.batch
        dev = tree.device
        sl = tree.infoset_slices[p]
        A = tree.max_actions
        H = tree.num_nodes
        R = tree.table_rows
        wide = B >= 4
        small = max(R, 2 * H) * B < 2**31
        rows, flat, shaped = self._indexers(small)
        edges = tree.player_edges[p]
        par = tree.parent[edges]
        nodes = tree.player_nodes[p]
        E = edges.numel()
        ws = self._ws
        table = self._table
        inner, position, _, _ = self._inner()
        M = inner.numel()
        r = ws["r"].view(M, 2, B)
        forward, prefix, backward = self._sweep_levels(rows, flat, shaped, ws, (2, B), 1)
        split = rows(tree.split_src[p].view(H, 2)[inner].reshape(-1), B)
        r_all = shaped(ws["r"], 2 * M, B)
        r_rows = shaped(ws["r"], M, 2 * B)
        cut = self._fill_prefix(
            table if wide else table.view(-1), split, r_all, r_rows, prefix, 2 if wide else 2 * B
        )
        if wide:
            cf_src, cf_idx = r[:, 1], position[par]
        else:
            cf_src = ws["r"]
            cf_idx = (position[par][:, None] * 2 * B + B + torch.arange(B, device=dev)).reshape(-1)
        if small:
            cf_idx = cf_idx.to(torch.int32)
        return {
            "table_src": table if wide else table.view(-1),
            "r_all": r_all[cut:],
            "r_rows": r_rows,
            "v_rows": shaped(ws["v"], H, B),
            "pe_all": shaped(ws["pe"], H, B),
            "split": split[cut:],
            "edge": rows(tree.edge_src, B),
            "forward": forward,
            "backward": backward,
            "util_b": tree.node_utility[:, p : p + 1].expand(H, B).reshape(-1).clone(),
            "cf": (cf_src, cf_idx),
            "v_edges": rows(edges, B),
            "v_par": rows(par, B),
            "inst": flat(tree.edge_flat[edges] - sl.start * A, B),
            "r_nodes": rows(position[nodes], 2 * B),
            "sums": flat(tree.infoset[nodes] - sl.start, 2 * B),
            "n_is": sl.stop - sl.start,
            "g": tuple(shaped(ws[k], E, B) for k in ("g1", "g2", "g3")),
            "legal": tree.legal_mask[sl],
            "legal_w": legal_weights(tree.legal_mask[sl], tree.dtype),
            "num_actions": tree.num_actions[sl],
            "policy_view": self.policy[:, sl],
            "table_view": table[sl.start * A : sl.stop * A],
            "rows_total": R,
        }

    def _indexers(self, small: bool) -> tuple[Callable, Callable, Callable]:
        """The index builders of a sweep plan for this solver's batch ``B``.

        Narrow rows (B < 4) use 1-D gathers/scatters over the flattened
        storage, several times faster than row gathers of one or two values;
        wide rows (B >= 4) use row gathers, whose index tensors stay small.
        ``small``: every gathered tensor has fewer than 2**31 entries, so
        gathers read 32-bit indices.

        ``rows(idx, k)``: gather indices of rows ``idx`` of a node-major tensor
        with ``k`` values per row; ``flat(idx, k)``: the same, always 1-D (sums
        go through ``scatter_add_``, half ``index_add_``'s time on the CPU);
        ``shaped(buf, n, k)``: a buffer viewed as ``n`` rows of ``k`` values.
        """
        dev = self.tree.device
        wide = self.batch >= 4

        def rows(idx: torch.Tensor, k: int) -> torch.Tensor:
            out = idx if wide else (idx[:, None] * k + torch.arange(k, device=dev)).reshape(-1)
            return out.to(torch.int32) if small else out

        def flat(idx: torch.Tensor, k: int) -> torch.Tensor:
            return (idx[:, None] * k + torch.arange(k, device=dev)).reshape(-1)

        def shaped(buf: torch.Tensor, n: int, k: int) -> torch.Tensor:
            return buf[: n * k].view(n, k) if wide else buf[: n * k]

        return rows, flat, shaped

    def _sweep_levels(
        self, rows: Callable, flat: Callable, shaped: Callable, ws: dict, reach: tuple[int, ...], V: int
    ) -> tuple[list, list, list]:
        """The level-by-level operations of a plan's sweeps over the workspace ``ws``, whose reach
        holds ``reach`` values per inner node (``(2, B)``: one player's own and others' reach;
        ``(N, 2, B)``: every player's) and whose values ``V * B`` per node.

        Returns ``(forward, prefix, backward)``: the reach products of the levels below the first
        decision depth ``d0`` and of those at or above it (:meth:`_fill_prefix` runs these once),
        and the value sums from the deepest level up to ``d0 + 1`` (no value above ``d0`` is read).
        """
        tree = self.tree
        B = self.batch
        _, _, levels, d0 = self._inner()
        K = math.prod(reach)
        H = tree.num_nodes
        r = ws["r"].view(-1, *reach)
        v = ws["v"].view(H, V, B)
        pe = ws["pe"].view(H, 1, B)
        tmp = ws["tmp"]
        forward: list = []
        prefix: list = []
        for d, a, b, parents in levels:
            n = b - a
            op = (rows(parents, K), shaped(tmp, n, K), r[a:b], tmp[: n * K].view(n, *reach))
            (prefix if d <= d0 else forward).append(op)
        backward = []
        for d in range(len(tree.level_bounds) - 1, d0, -1):
            lo, hi = tree.level_bounds[d]
            n = hi - lo
            part = tmp[: n * V * B]
            backward.append(
                (flat(tree.level_parent[d], V * B), v[lo:hi], pe[lo:hi], part.view(n, V, B), part)
            )
        return forward, prefix, backward

    def _fill_prefix(self, table_src, split, r_all, r_rows, prefix: list, per_position: int) -> int:
        """Write the reach of the inner nodes at depth ``<= d0`` (see :meth:`_fixed_depth`) into a
        sweep's workspace, with the sweep's own operations; return where the part of ``split`` and
        ``r_all`` that changes between iterations starts (``per_position`` entries of ``r_all`` per
        inner node)."""
        inner, _, _, d0 = self._inner()
        cut = int(torch.searchsorted(inner, self.tree.level_bounds[d0][1])) * per_position
        torch.index_select(table_src, 0, split[:cut], out=r_all[:cut])
        for idx, tmp_out, r_level, tmp_level in prefix:
            torch.index_select(r_rows, 0, idx, out=tmp_out)
            r_level.mul_(tmp_level)
        return cut

    def _inner(self) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int, torch.Tensor]], int]:
        """The inner (non-terminal) nodes in node order, each node's position among them (-1: terminal),
        per level below the root ``(depth, first, end, parents)``: the level's inner nodes as one range
        of positions, and their parents' positions; and the depth ``d0`` of the shallowest decision
        (see :meth:`_fixed_depth`).

        Reach is only read at decision nodes and at the parents of deeper nodes, never at a terminal,
        so the sweeps keep it for the inner nodes alone: most of the forward sweep's work is skipped
        (58% of Leduc's nodes are terminal). Nodes are ordered by depth, so each level's inner nodes
        are contiguous in this numbering.
        """
        cached = getattr(self, "_inner_cache", None)
        if cached is None:
            tree = self.tree
            dev = tree.device
            inner = torch.nonzero(tree.kind != TERMINAL).flatten()
            position = torch.full((tree.num_nodes,), -1, dtype=torch.long, device=dev)
            position[inner] = torch.arange(inner.numel(), device=dev)
            levels = []
            for d in range(1, len(tree.level_bounds)):
                lo, hi = tree.level_bounds[d]
                a, b = (int(torch.searchsorted(inner, x)) for x in (lo, hi))
                if b > a:
                    levels.append((d, a, b, position[tree.parent[inner[a:b]]]))
            cached = self._inner_cache = (inner, position, levels, self._fixed_depth())
        return cached

    def _fixed_depth(self) -> int:
        """``d0``: the depth of the shallowest decision node (0 when there is none).

        Every node at depth ``<= d0`` has only chance nodes above it, so its reach is a product of
        chance probabilities, the same at every iteration and for every player (own reach 1,
        everyone else's the chance product); and no value above depth ``d0`` is ever read (values
        are read at decision nodes and their children). The sweeps therefore compute that reach
        once and skip the levels above ``d0``: in poker, the deals.
        """
        tree = self.tree
        decision = torch.nonzero(tree.kind == DECISION).flatten()
        return int(tree.depth[decision].min()) if decision.numel() else 0

    def _workspace(self) -> dict:
        """Buffers reused by every sweep: allocating (and page-faulting) fresh
        multi-megabyte tensors each level costs more than the arithmetic."""
        ws = getattr(self, "_ws", None)
        if ws is None:
            tree = self.tree
            B = self.batch
            H = tree.num_nodes
            dt, dev = tree.dtype, tree.device
            widest = max((hi - lo for lo, hi in tree.level_bounds), default=1)
            most_edges = max((e.numel() for e in tree.player_edges), default=1)
            inner = self._inner()[0].numel()
            ws = {
                "r": torch.empty(inner * 2 * B, dtype=dt, device=dev),  # reach at the inner nodes
                "pe": torch.empty(H * B, dtype=dt, device=dev),
                "v": torch.empty(H * B, dtype=dt, device=dev),
                "tmp": torch.empty(widest * 2 * B, dtype=dt, device=dev),
                "g1": torch.empty(most_edges * B, dtype=dt, device=dev),
                "g2": torch.empty(most_edges * B, dtype=dt, device=dev),
                "g3": torch.empty(most_edges * B, dtype=dt, device=dev),
            }
            self._ws = ws
        return ws

    def _player_quantities(self, p: int):
        """Instantaneous regrets ``[B, I_p, A]``, own and counterfactual reach
        sums ``[B, I_p]`` of player p under the current policy.

        ``r(I,a) = sum_{h in I} pi_{-p}(h) (v_p(ha) - v_p(h))``,
        ``x(I) = sum_{h in I} pi_p(h)``, ``y(I) = sum_{h in I} pi_{-p}(h)``.
        """
        tree = self.tree
        B = self.batch
        A = tree.max_actions
        plan = self._plan[p]
        ws = self._workspace()
        n_is = plan["n_is"]
        # forward: own / counterfactual reach, [H, 2, B]
        torch.index_select(plan["table_src"], 0, plan["split"], out=plan["r_all"])
        r_rows = plan["r_rows"]
        for idx2, tmp_out, r_level, tmp_level in plan["forward"]:
            torch.index_select(r_rows, 0, idx2, out=tmp_out)
            r_level.mul_(tmp_level)
        # backward: p's expected utility from every node, [H, B]
        torch.index_select(plan["table_src"], 0, plan["edge"], out=plan["pe_all"])
        v_rows = plan["v_rows"]
        vflat = ws["v"]
        vflat.copy_(plan["util_b"])
        for idx1, v_level, pe_level, tmp_level, tmp_src in plan["backward"]:
            torch.mul(v_level, pe_level, out=tmp_level)
            vflat.scatter_add_(0, idx1, tmp_src)
        g1, g2, g3 = plan["g"]
        torch.index_select(v_rows, 0, plan["v_edges"], out=g2)
        torch.index_select(v_rows, 0, plan["v_par"], out=g3)
        torch.index_select(plan["cf"][0], 0, plan["cf"][1], out=g1)
        g2.sub_(g3).mul_(g1)
        dt, dv = self._table.dtype, self._table.device
        inst = torch.zeros(n_is * A * B, dtype=dt, device=dv)
        inst.scatter_add_(0, plan["inst"], g2.reshape(-1))
        sums = torch.zeros(n_is * 2 * B, dtype=dt, device=dv)
        sums.scatter_add_(0, plan["sums"], torch.index_select(r_rows, 0, plan["r_nodes"]).reshape(-1))
        inst = inst.view(n_is * A, B).T.reshape(B, n_is, A)
        sums = sums.view(n_is, 2, B).permute(1, 2, 0)  # [2, B, I_p]
        return inst, sums[0], sums[1]

    def _make_joint_plan(self) -> dict:
        """Index tensors and workspace for every player's quantities in one set of
        sweeps (simultaneous updates: all players see the same profile).

        The same arithmetic as :meth:`_player_quantities`, element for element and
        in the same order (every reach is the same running product, every value
        receives the same terms in the same order), so the results are bitwise
        those of N separate sweeps; what changes is that each level costs one
        gather and one product for all players instead of one per player, which
        is most of the time on Leduc-sized trees.
        """
        tree = self.tree
        B = self.batch
        N = tree.num_players
        H = tree.num_nodes
        dev = tree.device
        dt = tree.dtype
        wide = B >= 4
        rows, flat, shaped = self._indexers(max(tree.table_rows, 2 * H * N) * B < 2**31)
        inner, position, _, _ = self._inner()  # reach is kept at the inner nodes only
        M = inner.numel()
        widest = max((hi - lo for lo, hi in tree.level_bounds), default=1)
        edges = [tree.player_edges[p] for p in range(N)]
        E = sum(e.numel() for e in edges)
        # Values: one per player, or player 0's alone in a two-player zero-sum game (player 1's
        # are their negations, exactly: see `negate` below).
        zero_sum = N == 2 and bool(torch.equal(tree.node_utility[:, 1], -tree.node_utility[:, 0]))
        V = 1 if zero_sum else N
        ws = {
            "r": torch.empty(M * N * 2 * B, dtype=dt, device=dev),  # [M, N, 2, B]: (own, others') reach
            "pe": torch.empty(H * B, dtype=dt, device=dev),
            "v": torch.empty(H * V * B, dtype=dt, device=dev),  # [H, V, B]
            "tmp": torch.empty(widest * N * 2 * B, dtype=dt, device=dev),  # inner levels are narrower
            "g1": torch.empty(E * B, dtype=dt, device=dev),
            "g2": torch.empty(E * B, dtype=dt, device=dev),
            "g3": torch.empty(E * B, dtype=dt, device=dev),
        }
        K = N * 2 * B
        forward, prefix, backward = self._sweep_levels(rows, flat, shaped, ws, (N, 2, B), V)
        split = torch.stack([tree.split_src[p].view(H, 2) for p in range(N)], 1)[inner]  # [M, N, 2]
        split = rows(split.reshape(-1), B)
        table_src = self._table if wide else self._table.view(-1)
        r_all = shaped(ws["r"], M * N * 2, B)
        r_rows = shaped(ws["r"], M, K)
        cut = self._fill_prefix(table_src, split, r_all, r_rows, prefix, N * 2 if wide else K)
        util = tree.node_utility[:, :V].unsqueeze(-1).expand(H, V, B).reshape(-1).clone()
        # per player's decision edges, concatenated player after player; rows of v viewed [H * V, B]
        own_e = torch.cat([e * V + p % V for p, e in enumerate(edges)])
        own_par = torch.cat([tree.parent[e] * V + p % V for p, e in enumerate(edges)])
        # others' reach at the parent: rows of r viewed [M * N * 2, B]
        cf_par = torch.cat([position[tree.parent[e]] * N + p for p, e in enumerate(edges)]) * 2 + 1
        nodes = [tree.player_nodes[p] for p in range(N)]
        r_nodes = torch.cat([position[nd] * N + p for p, nd in enumerate(nodes)])  # rows of r as [M * N, 2B]
        A = tree.max_actions
        sl = tree.infoset_slices[-1]
        return {
            "ws": ws,
            "table_src": table_src,
            "r_all": r_all[cut:],
            "r_rows": r_rows,
            "r_pairs": shaped(ws["r"], M * N, 2 * B),
            "r_single": shaped(ws["r"], M * N * 2, B),
            "v_rows": shaped(ws["v"], H * V, B),
            "pe_all": shaped(ws["pe"], H, B),
            "split": split[cut:],
            "edge": rows(tree.edge_src, B),
            "forward": forward,
            "backward": backward,
            "util": util,
            "v_edges": rows(own_e, B),
            "v_par": rows(own_par, B),
            "cf_par": rows(cf_par, B),
            "inst": flat(torch.cat([tree.edge_flat[e] for e in edges]), B),
            # Player 1's values are player 0's negated: each of its terms v(ha) - v(h) comes out
            # negated (x and y negated give -(x - y) exactly), products by the reach too, and a sum
            # of negated terms is the negated sum (rounding to nearest is symmetric). So player 1's
            # regrets are those of player 0's values, negated once at the end: the same numbers.
            "negate": (sl.start * A * B, sl.stop * A * B) if zero_sum else None,
            "r_nodes": rows(r_nodes, 2 * B),
            "sums": flat(torch.cat([tree.infoset[nd] for nd in nodes]), 2 * B),
            "g": tuple(shaped(ws[k], E, B) for k in ("g1", "g2", "g3")),
        }

    def _joint_quantities(self):
        """:meth:`_player_quantities` of every player at once: ``[B, I, A]``,
        ``[B, I]``, ``[B, I]`` over all information sets (bitwise the same values)."""
        plan = self._joint
        if plan is None:
            plan = self._joint = self._make_joint_plan()
        tree = self.tree
        B = self.batch
        A = tree.max_actions
        n_is = tree.num_infosets
        torch.index_select(plan["table_src"], 0, plan["split"], out=plan["r_all"])
        r_rows = plan["r_rows"]
        for idx, tmp_out, r_level, tmp_level in plan["forward"]:
            torch.index_select(r_rows, 0, idx, out=tmp_out)
            r_level.mul_(tmp_level)
        torch.index_select(plan["table_src"], 0, plan["edge"], out=plan["pe_all"])
        vflat = plan["ws"]["v"]
        vflat.copy_(plan["util"])
        for idx, v_level, pe_level, tmp_level, tmp_src in plan["backward"]:
            torch.mul(v_level, pe_level, out=tmp_level)
            vflat.scatter_add_(0, idx, tmp_src)
        g1, g2, g3 = plan["g"]
        v_rows = plan["v_rows"]
        torch.index_select(v_rows, 0, plan["v_edges"], out=g2)
        torch.index_select(v_rows, 0, plan["v_par"], out=g3)
        torch.index_select(plan["r_single"], 0, plan["cf_par"], out=g1)
        g2.sub_(g3).mul_(g1)
        dt, dv = self._table.dtype, self._table.device
        inst = torch.zeros(n_is * A * B, dtype=dt, device=dv)
        inst.scatter_add_(0, plan["inst"], g2.reshape(-1))
        if plan["negate"] is not None:
            lo, hi = plan["negate"]
            inst[lo:hi].neg_()
        sums = torch.zeros(n_is * 2 * B, dtype=dt, device=dv)
        sums.scatter_add_(
            0, plan["sums"], torch.index_select(plan["r_pairs"], 0, plan["r_nodes"]).reshape(-1)
        )
        inst = inst.view(n_is * A, B).T.reshape(B, n_is, A)
        sums = sums.view(n_is, 2, B).permute(1, 2, 0)  # [2, B, I]
        return inst, sums[0], sums[1]

    def _apply(self, p: int, inst, reach, cf_reach, old_policy):
        plan = self._plan[p]
        st = self.players[p]
        ctx = HookContext(
            player=p,
            iteration=self.iteration,
            legal=plan["legal"],
            num_actions=plan["num_actions"],
            inst_regret=inst,
            batch=self.batch,
            shared=st.shared,
        )
        st.cum_policy = st.average.update(st.cum_policy, old_policy, reach, cf_reach, ctx)
        st.cum_regret = st.regret.update(st.cum_regret, inst, ctx)
        new_pol = st.policy_hook.update(st.cum_regret, old_policy, ctx) * plan["legal_w"]
        plan["policy_view"].copy_(new_pol)
        plan["table_view"].copy_(new_pol.reshape(self.batch, -1).T)

    def _apply_all(self, inst, reach, cf_reach, old_policy) -> None:
        """:meth:`_apply` of every player at once, through the shared hooks of a per-infoset algorithm."""
        tree = self.tree
        st = self._shared
        assert st is not None
        ctx = HookContext(
            player=-1,
            iteration=self.iteration,
            legal=tree.legal_mask,
            num_actions=tree.num_actions,
            inst_regret=inst,
            batch=self.batch,
            shared=st.shared,
        )
        st.cum_policy = st.average.update(st.cum_policy, old_policy, reach, cf_reach, ctx)
        st.cum_regret = st.regret.update(st.cum_regret, inst, ctx)
        new_pol = st.policy_hook.update(st.cum_regret, old_policy, ctx) * self._legal_w
        self.policy.copy_(new_pol)
        self._table[: tree.num_infosets * tree.max_actions].copy_(new_pol.reshape(self.batch, -1).T)
        for p, player in enumerate(self.players):  # each player's state, as views of the shared one
            sl = tree.infoset_slices[p]
            player.cum_policy = st.cum_policy[:, sl]
            player.cum_regret = st.cum_regret[:, sl]

    # --------------------------------------------------------------- public
    def step(self) -> None:
        """One iteration (every player updated once).

        It runs in ``torch.inference_mode()``: nothing here is differentiated,
        and on tree-sized tensors autograd's bookkeeping is a tenth to a fifth
        of the time. The solver's state is therefore made of inference tensors:
        read it freely, but change it only inside ``step`` (in the hooks).
        """
        with torch.inference_mode():
            self._step()

    def _step(self) -> None:
        self.iteration += 1
        tree = self.tree
        if self.algorithm.alternating:
            for p in range(tree.num_players):
                inst, reach, cf_reach = self._player_quantities(p)
                self._apply(p, inst, reach, cf_reach, self._plan[p]["policy_view"].clone())
        elif self._fits_one_sweep:
            inst, reach, cf_reach = self._joint_quantities()
            old = self.policy.clone()
            if self._shared is not None:
                self._apply_all(inst, reach, cf_reach, old)
                return
            for p in range(tree.num_players):
                sl = tree.infoset_slices[p]
                self._apply(p, inst[:, sl], reach[:, sl], cf_reach[:, sl], old[:, sl])
        else:
            quantities = [self._player_quantities(p) for p in range(tree.num_players)]
            old = self.policy.clone()
            for p, (inst, reach, cf_reach) in enumerate(quantities):
                self._apply(p, inst, reach, cf_reach, old[:, tree.infoset_slices[p]])

    def average_policy(self) -> torch.Tensor:
        """``[B, I, A]``: the accumulated policy, normalised (uniform where empty)."""
        tree = self.tree
        table = torch.zeros_like(self.policy)
        for p, st in enumerate(self.players):
            table[:, tree.infoset_slices[p]] = st.cum_policy
        return tree.normalise(table)

    def current_policy(self) -> torch.Tensor:
        return self.policy.clone()

    def evaluate(self, which: str = "average") -> Exploitability:
        pol = self.average_policy() if which == "average" else self.current_policy()
        return evaluate(self.tree, pol)

    def run(
        self,
        iterations: int,
        *,
        eval_every: int | None = None,
        eval_at: list[int] | None = None,
        callback: Callable[[int, Exploitability], None] | None = None,
    ) -> SolveResult:
        """Run ``iterations`` more iterations; evaluate the average policy at the
        listed iterations (or every ``eval_every``) and at the end."""
        checkpoints = set(eval_at or [])
        if eval_every:
            checkpoints |= set(
                range(self.iteration + eval_every, self.iteration + iterations + 1, eval_every)
            )
        end = self.iteration + iterations
        checkpoints.add(end)
        curve: list[tuple[int, list[float]]] = []
        t0 = time.perf_counter()
        solve_time = 0.0
        ev: Exploitability | None = None
        while self.iteration < end:
            s0 = time.perf_counter()
            self.step()
            solve_time += time.perf_counter() - s0
            if self.iteration in checkpoints:
                ev = self.evaluate()
                curve.append((self.iteration, ev.exploitability.tolist()))
                if callback is not None:
                    callback(self.iteration, ev)
        # The last iteration is always a checkpoint, so its evaluation is the
        # final one; only a run of zero iterations still needs one.
        if ev is None:
            ev = self.evaluate()
        return SolveResult(
            game=self.tree.game,
            algorithm=self.algorithm.name,
            iterations=self.iteration,
            nash_conv=ev.nash_conv.tolist(),
            exploitability=ev.exploitability.tolist(),
            curve=curve,
            solve_seconds=solve_time,
            wall_seconds=time.perf_counter() - t0,
            average_policy=self.average_policy().cpu(),
            tree=self.tree,
        )


@dataclass
class SolveResult:
    """What :meth:`CFRSolver.run` ends with, for each of its ``B`` batch variants.

    ``exploitability`` and ``nash_conv`` are the final values, one per variant
    (a list even for one solver: :attr:`final_exploitability` is the number);
    ``curve`` the ``(iteration, [exploitability per variant])`` checkpoints;
    ``average_policy`` the ``[B, I, A]`` average policies (on the CPU), which
    :meth:`tabular_policy` turns into an OpenSpiel ``TabularPolicy``.
    """

    game: str
    algorithm: str
    iterations: int
    nash_conv: list[float]
    exploitability: list[float]
    curve: list[tuple[int, list[float]]]
    solve_seconds: float
    wall_seconds: float
    average_policy: torch.Tensor | None = field(default=None, repr=False)
    tree: GameTree | None = field(default=None, repr=False, compare=False)

    @property
    def final_exploitability(self) -> float:
        """The final exploitability (NashConv / N) of a single solver's average policy."""
        if len(self.exploitability) != 1:
            raise ValueError(
                f"this run solved a batch of {len(self.exploitability)} variants: "
                "read exploitability[i] for variant i"
            )
        return self.exploitability[0]

    def tabular_policy(self, variant: int = 0):
        """The average policy of batch variant ``variant`` as an OpenSpiel ``TabularPolicy``
        (for ``open_spiel.python.algorithms.exploitability`` and the rest of OpenSpiel)."""
        if self.average_policy is None or self.tree is None:
            raise ValueError("this result holds no average policy (it was not made by CFRSolver.run)")
        if not 0 <= variant < self.average_policy.shape[0]:
            raise ValueError(f"variant must be in [0, {self.average_policy.shape[0]}), got {variant}")
        return self.tree.to_tabular_policy(self.average_policy[variant])


def solve(
    game: str | GameTree,
    algorithm: Algorithm | str = "cfr",
    iterations: int = 1000,
    *,
    device: str | torch.device = "auto",
    batch: int = 1,
    alternating: bool | None = None,
    eval_every: int | None = None,
) -> SolveResult:
    """Run ``algorithm`` for ``iterations`` on ``game`` and evaluate it exactly."""
    solver = CFRSolver(game, algorithm, batch=batch, alternating=alternating, device=device)
    return solver.run(iterations, eval_every=eval_every)
