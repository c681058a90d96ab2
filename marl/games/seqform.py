"""The sequence form of a tensor tree: exact values from the terminals alone.

Under perfect recall, the reach of a terminal ``z`` factors into one number per
player and one for chance: ``pi(z) = c(z) * prod_q x_q[s_q(z)]``, where
``s_q(z)`` is player ``q``'s last sequence (information set and action) on the
path to ``z`` and ``x_q`` is ``q``'s realisation plan (the sequence form of its
policy: the product of its own action probabilities down to a sequence,
computed per information set, not per history). So

* ``u_p(pi) = sum_z c(z) u_p(z) prod_q x_q[s_q(z)]`` (on-policy values);
* the best response of ``p``: its best counterfactual value of a sequence,
  ``G[I, a] = max over p's later choices of sum_{h in I} pi_{-p}(h) v_p(h a)``,
  is the sum of the counterfactual weights ``w_p(z) = c(z) u_p(z)
  prod_{q != p} x_q[s_q(z)]`` of the terminals whose last ``p``-sequence it
  is, plus ``max_b G[J, b]`` for every information set ``J`` that the
  sequence leads to: one bottom-up pass over ``p``'s information sets by own
  depth. The best-response value is the empty sequence's ``G``; and
  ``u_p(pi) = sum_s x_p[s] W_p[s]`` with ``W_p`` the weights summed per
  sequence before that pass.

This touches every terminal a few times and every information set once, and
never the inner histories: on 3-player Leduc (1.8 M histories, 1.0 M
terminals, 26 k information sets) exact evaluation takes about 13 ms on one
thread against 0.3 s for sweeping the tree level by level. The values are the
sweeps' up to the order of floating-point operations (about 1e-15 apart). The index structures depend
only on the tree; they are built once per tree and kept in ``tree.derived``.

Sequences are numbered globally: row ``p`` is player ``p``'s empty sequence,
row ``N + i * A + a`` the sequence (information set ``i``, action slot ``a``),
so that rows ``N:`` viewed as ``[I, A]`` line up with a policy's ``[I, A]``
and with the first ``I * A`` rows of :meth:`GameTree.prob_table`.
"""

from __future__ import annotations

import numpy as np
import torch

from .tree import CHANCE, DECISION, GameTree


def gather(src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``src[idx]`` for a contiguous ``[R, B]`` ``src``: ``[len(idx), B]``.
    With ``B == 1`` a 1-D gather, several times faster than a row gather."""
    if src.shape[1] == 1:
        return src.view(-1).index_select(0, idx).view(-1, 1)
    return src.index_select(0, idx)


def scatter_add(dst: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> None:
    """``dst[idx] += src`` (repeated indices accumulate) for a contiguous ``[R, B]`` ``dst``."""
    if dst.shape[1] == 1:
        dst.view(-1).index_add_(0, idx, src.reshape(-1))
    else:
        dst.index_add_(0, idx, src.reshape(-1, dst.shape[1]))


class SequenceIndex:
    """Policy-independent index structures of the sequence form of ``tree``."""

    def __init__(self, tree: GameTree):
        arr = tree.arrays
        N = tree.num_players
        A = tree.max_actions
        H = tree.num_nodes
        n_is = tree.num_infosets
        dev = tree.device

        def t(x, dt=torch.long):
            return torch.as_tensor(np.ascontiguousarray(x), dtype=dt, device=dev)

        parent = arr.parent
        has_par = parent >= 0
        safe_par = np.maximum(parent, 0)
        par_kind = np.where(has_par, arr.kind[safe_par], -1)
        par_player = np.where(has_par, arr.player[safe_par], -1)
        par_infoset = np.where(has_par, arr.infoset[safe_par], -1)
        chance_factor = np.where(par_kind == CHANCE, arr.chance_prob, 1.0)

        # chance reach of every node and every player's last sequence on its path,
        # level by level (a parent always sits on the level above its children)
        creach = np.ones(H)
        last = np.repeat(np.arange(N, dtype=np.int64)[:, None], H, axis=1)  # [N, H]
        own_seq = N + np.where(par_kind == DECISION, par_infoset * A + arr.slot, 0)
        for lo, hi in tree.level_bounds[1:]:
            pp = parent[lo:hi]
            creach[lo:hi] = creach[pp] * chance_factor[lo:hi]
            for p in range(N):
                mine = (par_kind[lo:hi] == DECISION) & (par_player[lo:hi] == p)
                last[p, lo:hi] = np.where(mine, own_seq[lo:hi], last[p, pp])

        self.num_players, self.max_actions, self.num_infosets = N, A, n_is
        self.num_seq = N + n_is * A
        term = arr.terminals
        self.num_terminals = len(term)
        self.term_rows = t(last[:, term].reshape(-1))  # [N * T]: s_q(z), player-major
        self.term_cu = t(
            (creach[term][:, None] * arr.utility).T[:, :, None], tree.dtype
        )  # [N, T, 1]: c(z) u_q(z)

        # the parent sequence of every information set (perfect recall: one per set)
        dec = np.nonzero(arr.kind == DECISION)[0]
        ps = np.zeros(n_is, dtype=np.int64)
        ps[arr.infoset[dec]] = last[arr.player[dec], dec]
        self.depth = int(arr.own_depth.max()) + 1 if n_is else 1
        # per own depth, shallowest first: (information sets, their parent sequences)
        self.levels = []
        for k in range(self.depth if n_is else 0):
            js = np.nonzero(arr.own_depth == k)[0]
            if len(js):
                self.levels.append((t(js), t(ps[js])))
        # realisation plans as one gather and one product: for every sequence the
        # prob-table rows of its own actions from the root down, padded with the
        # table's constant-1 row (empty sequences are all padding)
        anc = np.full((self.num_seq, self.depth), tree.one_row, dtype=np.int64)
        slots = np.arange(A)
        for k in range(self.depth if n_is else 0):
            js = np.nonzero(arr.own_depth == k)[0]
            rows = N + js[:, None] * A + slots  # [n, A]
            anc[rows] = anc[ps[js]][:, None, :]
            anc[rows, k] = js[:, None] * A + slots
        self.ancestors = t(anc.reshape(-1))
        self.legal = tree.legal_mask.unsqueeze(-1)  # [I, A, 1]
        self.infoset_ranges = [(sl.start, sl.stop) for sl in tree.infoset_slices]

    def plans(self, table: torch.Tensor) -> torch.Tensor:
        """``[S, B]``: every player's realisation plan from a probability table ``[R, B]``."""
        B = table.shape[1]
        return gather(table, self.ancestors).view(self.num_seq, self.depth, B).prod(1)

    def leaf_values(self, x: torch.Tensor) -> torch.Tensor:
        """``[S, B]``: every player's counterfactual weights ``w_p(z)`` summed
        into its last sequences, from the realisation plans ``x`` ``[S, B]``."""
        N, T, B = self.num_players, self.num_terminals, x.shape[1]
        G = torch.zeros(self.num_seq, B, dtype=x.dtype, device=x.device)
        X = gather(x, self.term_rows).view(N, T, B)  # each terminal's N reaches
        # one [T, B] buffer, reused player after player (fresh multi-megabyte
        # temporaries cost more than the arithmetic)
        buf = torch.empty(T, B, dtype=x.dtype, device=x.device)
        for p in range(N):
            qs = [q for q in range(N) if q != p]
            if qs:
                torch.mul(self.term_cu[p], X[qs[0]], out=buf)
            else:
                buf.copy_(self.term_cu[p].expand(T, B))
            for q in qs[1:]:
                buf.mul_(X[q])
            scatter_add(G, self.term_rows[p * T : (p + 1) * T], buf)
        return G

    def best_response_values(self, G: torch.Tensor) -> torch.Tensor:
        """Complete ``G`` (from :meth:`leaf_values`) bottom-up, in place:
        ``G[parent(J)] += max_b G[J, b]``, by own depth, deepest first. Then
        ``G[p]`` is player ``p``'s best-response value; returns ``G``."""
        G3 = G[self.num_players :].view(self.num_infosets, self.max_actions, G.shape[1])
        for js, ps in reversed(self.levels):
            q = G3.index_select(0, js).masked_fill_(~self.legal.index_select(0, js), float("-inf"))
            scatter_add(G, ps, q.amax(1))
        return G

    def player_sums(self, y: torch.Tensor) -> torch.Tensor:
        """``[N, B]``: the sum of ``y`` ``[S, B]`` over each player's sequences."""
        N, A = self.num_players, self.max_actions
        out = y[:N].clone()
        for p, (lo, hi) in enumerate(self.infoset_ranges):
            out[p] += y[N + lo * A : N + hi * A].sum(0)
        return out


def sequence_index(tree: GameTree) -> SequenceIndex:
    idx = tree.derived.get("sequence_form")
    if idx is None:
        idx = SequenceIndex(tree)
        tree.derived["sequence_form"] = idx
    return idx


def values_and_best_responses(tree: GameTree, policy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B, N], [B, N])``: each player's on-policy value and best-response
    value against the others' parts of ``policy`` ``[B, I, A]``."""
    idx = sequence_index(tree)
    N = tree.num_players
    x = idx.plans(tree.prob_table(policy))
    G = idx.leaf_values(x)
    on = idx.player_sums(x * G)  # u_p = sum_z w_p(z) x_p[s_p(z)] = sum_s x_p[s] W_p[s]
    idx.best_response_values(G)
    return on.T.contiguous(), G[:N].T.contiguous()
