"""Flattened game trees ("tensor trees") built from OpenSpiel games.

A game string such as ``"leduc_poker(players=3)"`` is expanded once, depth
first, into flat arrays over its histories (nodes):

* ``parent``, ``depth``, ``kind`` (decision / chance / terminal) and ``player``;
* for the edge into every non-root node: the probability source — either a
  chance probability or a slot ``infoset * A + action_slot`` of the flattened
  policy table;
* for decision nodes: the information set, whose legal actions (OpenSpiel
  action ids) occupy the first ``num_actions[i]`` of ``A`` slots;
* for terminals: the utility of every player (general-sum, N players).

Nodes are renumbered so that each depth is one contiguous slice, which lets a
solver sweep the tree level by level with a handful of tensor operations per
level, on the CPU or on CUDA.

Simultaneous-move games go through OpenSpiel's turn-based conversion. Games
without perfect recall are refused (CFR's guarantees and the best response
computed here both need it), as are trees larger than ``max_nodes``.

Built trees are cached on disk (``$SOCIETAS_CACHE/games`` or
``~/.cache/societas/games``), keyed by the game string, the OpenSpiel version
and the format version of this module.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyspiel
import torch
from open_spiel.python import policy as os_policy

from societas.marl.device import resolve_device

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
DECISION, CHANCE, TERMINAL = 0, 1, 2
DEFAULT_MAX_NODES = 30_000_000


class GameTreeError(ValueError):
    """A game that the tensor-tree engine cannot handle, and why."""


def cache_dir() -> Path:
    root = os.environ.get("SOCIETAS_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "societas"
    return base / "games"


def _normalise_game_string(game: str) -> str:
    return re.sub(r"\s+", "", game)


def _openspiel_version() -> str:
    try:
        return version("open_spiel")
    except Exception:
        return "unknown"


def unknown_game_message(game: str) -> str | None:
    """Why OpenSpiel does not know ``game``'s name (close matches first, then every
    registered name once), or ``None`` when it is registered."""
    name = game.split("(", 1)[0].strip()
    known = sorted(pyspiel.registered_names())
    if name in known:
        return None
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown game {name!r}{hint} (OpenSpiel has {len(known)} games: {', '.join(known)})"


def load_openspiel_game(game: str):
    """Load ``game`` with OpenSpiel; simultaneous games become turn-based."""
    # Checked here: OpenSpiel itself prints its whole list of games to stderr before raising,
    # which then appeared twice.
    if (problem := unknown_game_message(game)) is not None:
        raise GameTreeError(problem)
    try:
        g = pyspiel.load_game(game)
    except Exception as exc:  # pyspiel raises a plain RuntimeError
        raise GameTreeError(f"OpenSpiel cannot load game {game!r}: {exc}") from exc
    gtype = g.get_type()
    if gtype.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        g = pyspiel.convert_to_turn_based(g)
        gtype = g.get_type()
    if gtype.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise GameTreeError(
            f"game {game!r} has dynamics {gtype.dynamics}; only sequential games "
            "(and simultaneous ones through the turn-based conversion) are supported"
        )
    if gtype.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        raise GameTreeError(
            f"game {game!r} has sampled (implicit) chance; the tree needs explicit "
            "chance outcomes with probabilities"
        )
    if not gtype.provides_information_state_string:
        raise GameTreeError(
            f"game {game!r} does not provide information state strings, so its "
            "information sets cannot be identified"
        )
    return g


@dataclass
class TreeArrays:
    """The flat arrays of a game tree (numpy, as built and cached)."""

    game: str
    num_players: int
    parent: np.ndarray  # [H] int64, -1 at the root
    depth: np.ndarray  # [H] int64
    kind: np.ndarray  # [H] int8: DECISION / CHANCE / TERMINAL
    player: np.ndarray  # [H] int64: acting player, -1 chance, -2 terminal
    infoset: np.ndarray  # [H] int64: infoset of decision nodes, else -1
    slot: np.ndarray  # [H] int64: action slot of the edge from the parent, -1 at root
    chance_prob: np.ndarray  # [H] float64: probability of the edge if the parent is chance, else 0
    utility: np.ndarray  # [T, N] float64 for terminals, in order of `terminals`
    terminals: np.ndarray  # [T] int64 node ids of the terminals
    infoset_player: np.ndarray  # [I] int64
    num_actions: np.ndarray  # [I] int64
    actions: np.ndarray  # [I, A] int64 OpenSpiel action ids, -1 padding
    own_depth: np.ndarray  # [I] int64: how many own decisions precede the infoset
    infoset_keys: np.ndarray  # [I] str: information state strings


def _too_big(game: str, max_nodes: int) -> str:
    return (
        f"game {game!r} has more than max_nodes={max_nodes:,} histories; its tree "
        "does not fit this engine's memory budget (about 200 bytes per history on "
        "the device; raise max_nodes if the machine has the memory)"
    )


def estimate_histories(game: Any, probes: int = 256, seed: int = 0, cap: float = 1e18) -> float:
    """Knuth's estimate of a game's number of histories from ``probes`` random playouts.

    Along one playout, the product of the branching factors met so far
    estimates the number of histories at each depth; their sum over depths,
    averaged over playouts, is an unbiased estimate of the tree's size (heavy
    tails make a finite average low rather than high). Milliseconds for the
    poker games; chess reaches ``cap`` within a few moves.
    """
    rng = random.Random(seed)
    total = 0.0
    for _ in range(probes):
        state = game.new_initial_state()
        est = width = 1.0
        while not state.is_terminal() and est < cap:
            if state.is_chance_node():
                actions = [a for a, _ in state.chance_outcomes()]
            else:
                actions = state.legal_actions()
            width *= len(actions)
            est += width
            state = state.child(rng.choice(actions))
        total += min(est, cap)
    return total / probes


# Trees estimated larger than this are built with a warning and progress lines.
_BIG_TREE = 1_000_000
_PROGRESS_EVERY_S = 10.0


def expand_game_tree(game_string: str, max_nodes: int, game=None) -> TreeArrays:
    """Expand a game depth first. ``game`` defaults to OpenSpiel's game for
    ``game_string``; any object with OpenSpiel's state interface works.

    The size is estimated first (:func:`estimate_histories`): a game estimated
    at more than twice ``max_nodes`` is refused at once, with the estimate and
    the limit, instead of after minutes of expansion; a big one is announced
    and its expansion reports progress.
    """
    game = load_openspiel_game(game_string) if game is None else game
    estimate = estimate_histories(game)
    if estimate > 2 * max_nodes:
        raise GameTreeError(
            f"game {game_string!r} has about {estimate:.2g} histories (estimated from random playouts), "
            f"more than max_nodes={max_nodes:,}: its tree does not fit this engine's memory budget "
            "(about 200 bytes per history on the device; raise max_nodes if the machine has the memory)"
        )
    big = estimate > _BIG_TREE
    if big:
        logger.warning(
            "building the tree of %s: about %.2g histories (estimated), which takes a while; "
            "it is cached on disk afterwards",
            game_string,
            estimate,
        )
    next_report = time.perf_counter() + _PROGRESS_EVERY_S
    n_players = game.num_players()
    parent: list[int] = []
    depth: list[int] = []
    kind: list[int] = []
    player: list[int] = []
    infoset: list[int] = []
    slot: list[int] = []
    chance_prob: list[float] = []
    util_nodes: list[int] = []
    utils: list[list[float]] = []
    info_index: dict[tuple[int, str], int] = {}
    info_player: list[int] = []
    info_actions: list[list[int]] = []
    info_seq: list[tuple[int, int] | None] = []  # last own (infoset, slot) before it
    info_own_depth: list[int] = []
    info_keys: list[str] = []

    root = game.new_initial_state()
    # stack entries: (state, parent id, depth, slot, chance prob, per-player last own (infoset, slot), own depths)
    stack: list[tuple[Any, int, int, int, float, tuple, tuple]] = [
        (root, -1, 0, -1, 0.0, (None,) * n_players, (0,) * n_players)
    ]
    while stack:
        state, par, d, sl, cp, last_own, own_d = stack.pop()
        nid = len(parent)
        if nid >= max_nodes:
            raise GameTreeError(_too_big(game_string, max_nodes))
        if big and nid % 65536 == 0 and time.perf_counter() > next_report:
            logger.warning("building the tree of %s: %d histories so far", game_string, nid)
            next_report = time.perf_counter() + _PROGRESS_EVERY_S
        parent.append(par)
        depth.append(d)
        slot.append(sl)
        chance_prob.append(cp)
        if state.is_terminal():
            kind.append(TERMINAL)
            player.append(-2)
            infoset.append(-1)
            util_nodes.append(nid)
            utils.append(list(state.returns()))
            continue
        if state.is_chance_node():
            kind.append(CHANCE)
            player.append(-1)
            infoset.append(-1)
            outcomes = state.chance_outcomes()
            for k in range(len(outcomes) - 1, -1, -1):
                action, prob = outcomes[k]
                if prob <= 0:
                    continue
                stack.append((state.child(action), nid, d + 1, k, float(prob), last_own, own_d))
            continue
        p = state.current_player()
        if p < 0:
            raise GameTreeError(
                f"game {game_string!r} reached a node with player id {p} that is neither chance nor terminal"
            )
        key = state.information_state_string(p)
        legal = list(state.legal_actions(p))
        if not legal:
            raise GameTreeError(f"game {game_string!r}: decision node without legal actions")
        iid = info_index.get((p, key))
        if iid is None:
            iid = len(info_player)
            info_index[(p, key)] = iid
            info_player.append(p)
            info_actions.append(legal)
            info_seq.append(last_own[p])
            info_own_depth.append(own_d[p])
            info_keys.append(key)
        else:
            if info_actions[iid] != legal:
                raise GameTreeError(
                    f"game {game_string!r}: histories of information set {key!r} have different legal actions"
                )
            if info_seq[iid] != last_own[p]:
                raise GameTreeError(
                    f"game {game_string!r} does not have perfect recall: information set "
                    f"{key!r} of player {p} is reached after different own decisions"
                )
        kind.append(DECISION)
        player.append(p)
        infoset.append(iid)
        for k in range(len(legal) - 1, -1, -1):
            new_last = last_own[:p] + ((iid, k),) + last_own[p + 1 :]
            new_own = own_d[:p] + (own_d[p] + 1,) + own_d[p + 1 :]
            stack.append((state.child(legal[k]), nid, d + 1, k, 0.0, new_last, new_own))

    num_actions = np.array([len(a) for a in info_actions], dtype=np.int64)
    a_max = int(num_actions.max()) if len(num_actions) else 1
    actions = np.full((len(info_actions), a_max), -1, dtype=np.int64)
    for i, acts in enumerate(info_actions):
        actions[i, : len(acts)] = acts
    return TreeArrays(
        game=game_string,
        num_players=n_players,
        parent=np.asarray(parent, dtype=np.int64),
        depth=np.asarray(depth, dtype=np.int64),
        kind=np.asarray(kind, dtype=np.int8),
        player=np.asarray(player, dtype=np.int64),
        infoset=np.asarray(infoset, dtype=np.int64),
        slot=np.asarray(slot, dtype=np.int64),
        chance_prob=np.asarray(chance_prob, dtype=np.float64),
        utility=np.asarray(utils, dtype=np.float64).reshape(len(utils), n_players),
        terminals=np.asarray(util_nodes, dtype=np.int64),
        infoset_player=np.asarray(info_player, dtype=np.int64),
        num_actions=num_actions,
        actions=actions,
        own_depth=np.asarray(info_own_depth, dtype=np.int64),
        infoset_keys=np.asarray(info_keys, dtype=np.str_),
    )


def _renumber(arr: TreeArrays) -> TreeArrays:
    """Order nodes by depth (stable in DFS order), infosets by player (stable)."""
    order = np.argsort(arr.depth, kind="stable")
    new_id = np.empty_like(order)
    new_id[order] = np.arange(len(order))
    parent = arr.parent[order]
    parent = np.where(parent >= 0, new_id[np.maximum(parent, 0)], -1)

    iorder = np.argsort(arr.infoset_player, kind="stable")
    new_iid = np.empty_like(iorder)
    new_iid[iorder] = np.arange(len(iorder))
    infoset = arr.infoset[order]
    infoset = np.where(infoset >= 0, new_iid[np.maximum(infoset, 0)], -1)

    term_new = new_id[arr.terminals]
    torder = np.argsort(term_new, kind="stable")
    return TreeArrays(
        game=arr.game,
        num_players=arr.num_players,
        parent=parent,
        depth=arr.depth[order],
        kind=arr.kind[order],
        player=arr.player[order],
        infoset=infoset,
        slot=arr.slot[order],
        chance_prob=arr.chance_prob[order],
        utility=arr.utility[torder],
        terminals=term_new[torder],
        infoset_player=arr.infoset_player[iorder],
        num_actions=arr.num_actions[iorder],
        actions=arr.actions[iorder],
        own_depth=arr.own_depth[iorder],
        infoset_keys=arr.infoset_keys[iorder],
    )


def cache_path(game: str) -> Path:
    """Where the tree arrays of ``game`` are cached (keyed by game, OpenSpiel version and format)."""
    key = f"{_normalise_game_string(game)}|open_spiel={_openspiel_version()}|fmt={FORMAT_VERSION}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", _normalise_game_string(game))[:60]
    return cache_dir() / f"{safe}-{digest}.npz"


def build_arrays(game: str, *, cache: bool = True, max_nodes: int = DEFAULT_MAX_NODES) -> TreeArrays:
    """The tree arrays of ``game``, from the disk cache when present."""
    game = _normalise_game_string(game)
    path = cache_path(game)
    if cache and path.exists():
        try:
            with np.load(path, allow_pickle=False) as data:
                fields = {k: data[k] for k in data.files}
            return TreeArrays(
                game=str(fields.pop("game")), num_players=int(fields.pop("num_players")), **fields
            )
        except Exception as exc:
            logger.warning("ignoring unreadable game cache %s (%s); rebuilding", path, exc)
    t0 = time.perf_counter()
    arr = _renumber(expand_game_tree(game, max_nodes))
    logger.info(
        "built %s: %d histories, %d infosets in %.1fs",
        game,
        len(arr.parent),
        len(arr.infoset_player),
        time.perf_counter() - t0,
    )
    if cache:
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
            os.close(fd)
            payload = {k: v for k, v in arr.__dict__.items() if k not in ("game", "num_players")}
            with open(tmp, "wb") as fh:
                np.savez(fh, game=np.str_(arr.game), num_players=np.int64(arr.num_players), **payload)
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk costs the cache, not the run
            logger.warning("could not write the game cache %s (%s); continuing without it", path, exc)
        finally:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
    return arr


class GameTree:
    """A game tree as torch tensors on one device, with the index structures
    that the solvers and the best response sweep level by level.

    Policies are tensors ``[B, I, A]`` (``B`` variants, ``I`` information sets
    of all players, ``A`` the largest number of actions) with zeros on padding
    slots; information sets are ordered by player, player ``p`` owning the
    contiguous range ``infoset_slices[p]``.
    """

    def __init__(
        self, arrays: TreeArrays, device: str | torch.device = "auto", dtype: torch.dtype = torch.float64
    ):
        self.arrays = arrays
        self.game = arrays.game
        self.device = resolve_device(device)
        self.dtype = dtype
        self.num_players = arrays.num_players
        dev = self.device
        self.num_nodes = len(arrays.parent)
        self.num_infosets = len(arrays.infoset_player)
        self.max_actions = arrays.actions.shape[1] if self.num_infosets else 1
        self.infoset_keys = [str(k) for k in arrays.infoset_keys]
        self._flat_cache: dict = {}
        # Index structures derived from the tree by other modules (best
        # response, PSRO), stored here so they live and die with the tree.
        self.derived: dict = {}
        A = self.max_actions

        def t(x, dt=torch.long):
            return torch.as_tensor(np.ascontiguousarray(x), dtype=dt, device=dev)

        self.parent = t(arrays.parent)
        self.depth = t(arrays.depth)
        self.kind = t(arrays.kind, torch.int8)
        self.player = t(arrays.player)
        self.infoset = t(arrays.infoset)
        self.infoset_player = t(arrays.infoset_player)
        self.num_actions = t(arrays.num_actions)
        self.actions = t(arrays.actions)
        self.own_depth = t(arrays.own_depth)
        self.terminals = t(arrays.terminals)
        self.utility = t(arrays.utility, dtype)  # [T, N]
        self.legal_mask = torch.arange(A, device=dev)[None, :] < self.num_actions[:, None]

        ip = arrays.infoset_player
        self.infoset_slices = []
        for p in range(self.num_players):
            idx = np.nonzero(ip == p)[0]
            lo, hi = (int(idx[0]), int(idx[-1]) + 1) if len(idx) else (0, 0)
            self.infoset_slices.append(slice(lo, hi))

        # Levels: contiguous node ranges per depth.
        depth = arrays.depth
        self.max_depth = int(depth.max()) if len(depth) else 0
        bounds = np.searchsorted(depth, np.arange(self.max_depth + 2))
        self.level_bounds = [(int(bounds[d]), int(bounds[d + 1])) for d in range(self.max_depth + 1)]

        # Edge into each non-root node: where its probability comes from.
        par = arrays.parent
        has_par = par >= 0
        par_kind = np.where(has_par, arrays.kind[np.maximum(par, 0)], -1)
        par_player = np.where(has_par, arrays.player[np.maximum(par, 0)], -1)
        par_infoset = np.where(has_par, arrays.infoset[np.maximum(par, 0)], -1)
        edge_flat = np.where(par_kind == DECISION, par_infoset * A + arrays.slot, 0)
        self.edge_is_decision = t(par_kind == DECISION, torch.bool)
        self.edge_flat = t(edge_flat)  # [H]
        self.edge_player = t(np.where(par_kind == DECISION, par_player, -1))  # [H]
        self.chance_prob = t(np.where(par_kind == CHANCE, arrays.chance_prob, 0.0), dtype)
        # Per level: (lo, hi, parent indices relative to the whole tree)
        self.level_parent = [self.parent[lo:hi] for lo, hi in self.level_bounds]

        # The probability table: rows [0, I*A) are policy entries, then one row
        # per chance edge, then a constant 1. ``edge_src[n]`` is the row holding
        # the probability of the edge into node n (the constant for the root).
        chance_edges = np.nonzero(par_kind == CHANCE)[0]
        self.table_rows = self.num_infosets * A + len(chance_edges) + 1
        self.one_row = self.table_rows - 1
        src = np.full(self.num_nodes, self.one_row, dtype=np.int64)
        src[par_kind == DECISION] = edge_flat[par_kind == DECISION]
        src[chance_edges] = self.num_infosets * A + np.arange(len(chance_edges))
        self.edge_src = t(src)
        self.chance_values = t(arrays.chance_prob[chance_edges], dtype)
        owner = np.where(par_kind == DECISION, par_player, np.where(par_kind == CHANCE, self.num_players, -1))
        self.edge_owner = owner
        # Per player: [H, 2] rows of (own factor, everyone else's factor).
        self.split_src = []
        for p in range(self.num_players):
            mine = owner == p
            pair = np.stack([np.where(mine, src, self.one_row), np.where(mine, self.one_row, src)], 1)
            self.split_src.append(t(pair.reshape(-1)))
        # [H, N+1]: each player's factor and chance's.
        cols = [np.where(owner == q, src, self.one_row) for q in range(self.num_players + 1)]
        self.all_src = t(np.stack(cols, 1).reshape(-1))
        # Utility of each player at every node (zero off the terminals), node-major.
        un = np.zeros((self.num_nodes, self.num_players))
        un[arrays.terminals] = arrays.utility
        self.node_utility = t(un, dtype)  # [H, N]

        # Decision nodes of each player and the edges out of them.
        kind = arrays.kind
        self.player_nodes = []
        self.player_edges = []
        for p in range(self.num_players):
            self.player_nodes.append(t(np.nonzero((kind == DECISION) & (arrays.player == p))[0]))
            self.player_edges.append(t(np.nonzero((par_kind == DECISION) & (par_player == p))[0]))

        # Infosets whose histories all lie at one depth allow a one-sweep best response.
        dec = np.nonzero(kind == DECISION)[0]
        if len(dec):
            iset = arrays.infoset[dec]
            dmin = np.full(self.num_infosets, np.iinfo(np.int64).max)
            dmax = np.full(self.num_infosets, -1)
            np.minimum.at(dmin, iset, depth[dec])
            np.maximum.at(dmax, iset, depth[dec])
            self.depth_uniform = bool(np.all(dmin == dmax))
            self.infoset_depth = t(dmin)
        else:
            self.depth_uniform = True
            self.infoset_depth = t(np.zeros(0, dtype=np.int64))

    # ------------------------------------------------------------------ info
    def __repr__(self) -> str:
        return (
            f"GameTree({self.game!r}, players={self.num_players}, histories={self.num_nodes:,}, "
            f"infosets={self.num_infosets:,}, max_actions={self.max_actions}, "
            f"depth={self.max_depth}, device={self.device})"
        )

    # -------------------------------------------------------------- policies
    def uniform_policy(self, batch: int = 1) -> torch.Tensor:
        pol = self.legal_mask.to(self.dtype) / self.num_actions[:, None].to(self.dtype)
        return pol.unsqueeze(0).expand(batch, -1, -1).contiguous()

    def random_policy(self, batch: int = 1, seed: int = 0) -> torch.Tensor:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.rand(batch, self.num_infosets, self.max_actions, generator=gen, dtype=self.dtype).to(
            self.device
        )
        x = x * self.legal_mask
        return x / x.sum(-1, keepdim=True)

    def normalise(self, table: torch.Tensor) -> torch.Tensor:
        """Normalise non-negative weights per infoset; uniform where they sum to 0."""
        table = table * self.legal_mask
        s = table.sum(-1, keepdim=True)
        uni = self.legal_mask.to(table.dtype) / self.num_actions[:, None].to(table.dtype)
        return torch.where(s > 0, table / torch.where(s > 0, s, torch.ones_like(s)), uni)

    def to_tabular_policy(self, policy: torch.Tensor, game=None):
        """An OpenSpiel ``TabularPolicy`` holding ``policy`` (``[I, A]`` or ``[1, I, A]``)."""
        if policy.dim() == 3:
            if policy.shape[0] != 1:
                raise ValueError(f"to_tabular_policy takes one policy, not a batch of {policy.shape[0]}")
            policy = policy[0]
        game = game if game is not None else load_openspiel_game(self.game)
        tab = os_policy.TabularPolicy(game)
        pol = policy.detach().to("cpu", torch.float64).numpy()
        acts = self.arrays.actions
        for i, key in enumerate(self.infoset_keys):
            row = tab.state_lookup.get(key)
            if row is None:
                raise GameTreeError(f"information state {key!r} is not in OpenSpiel's TabularPolicy")
            probs = tab.action_probability_array[row]
            probs[:] = 0.0
            n = int(self.arrays.num_actions[i])
            probs[acts[i, :n]] = pol[i, :n]
        return tab

    def from_openspiel_policy(self, pol) -> torch.Tensor:
        """``[1, I, A]`` tensor from an OpenSpiel policy: a Python ``TabularPolicy``, or
        a C++ ``pyspiel.Policy`` (what ``pyspiel.CFRSolver``'s ``average_policy()`` and
        ``current_policy()`` return), read through ``get_state_policy`` of each
        information state; actions a C++ policy leaves out get probability 0."""
        out = np.zeros((self.num_infosets, self.max_actions))
        tab_lookup = getattr(pol, "state_lookup", None)
        arr = getattr(pol, "action_probability_array", None)
        if tab_lookup is not None and arr is not None:
            for i, key in enumerate(self.infoset_keys):
                n = int(self.arrays.num_actions[i])
                out[i, :n] = arr[tab_lookup[key]][self.arrays.actions[i, :n]]
        elif callable(getattr(pol, "get_state_policy", None)):
            for i, key in enumerate(self.infoset_keys):
                n = int(self.arrays.num_actions[i])
                probs = dict(pol.get_state_policy(key))
                out[i, :n] = [probs.get(int(a), 0.0) for a in self.arrays.actions[i, :n]]
        else:
            raise TypeError(
                f"from_openspiel_policy needs a TabularPolicy or a pyspiel.Policy (got {type(pol).__name__})"
            )
        return torch.as_tensor(out, dtype=self.dtype, device=self.device).unsqueeze(0)

    def flat_index(self, idx: torch.Tensor, k: int) -> torch.Tensor:
        """Row indices ``idx`` into a node-major tensor with ``k`` values per row,
        as indices into its flattened storage (1-D gathers and scatters are much
        faster than row gathers for narrow rows)."""
        if k == 1:
            return idx
        key = (id(idx), k)
        hit = self._flat_cache.get(key)
        if hit is None or hit[0] is not idx:
            flat = (idx[:, None] * k + torch.arange(k, device=idx.device)).reshape(-1)
            hit = (idx, flat)
            self._flat_cache[key] = hit
        return hit[1]

    def gather_rows(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``x[idx]`` along the first dimension, for a contiguous ``x``."""
        k = x.stride(0) if x.dim() > 1 else 1
        out = x.view(-1).index_select(0, self.flat_index(idx, k))
        return out.view(idx.shape[0], *x.shape[1:])

    def add_rows(self, out: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        """``out[idx] += src`` along the first dimension (repeated indices
        accumulate), for contiguous ``out`` and ``src``."""
        k = out.stride(0) if out.dim() > 1 else 1
        # a 1-D scatter_add_: the sums of index_add_ in the same order, in less time on the CPU
        out.view(-1).scatter_add_(0, self.flat_index(idx, k), src.reshape(-1))
        return out

    def prob_table(self, policy: torch.Tensor) -> torch.Tensor:
        """``[R, B]``: the probability table of a policy batch ``[B, I, A]``
        (policy rows, then chance rows, then the constant 1), node-major."""
        B = policy.shape[0]
        n = self.num_infosets * self.max_actions
        table = torch.empty(self.table_rows, B, dtype=self.dtype, device=self.device)
        table[:n] = policy.reshape(B, n).T
        table[n:-1] = self.chance_values[:, None]
        table[-1] = 1.0
        return table

    def check_policy(self, policy: torch.Tensor) -> torch.Tensor:
        """Validate a policy tensor and return it as ``[B, I, A]`` on this device."""
        if policy.dim() == 2:
            policy = policy.unsqueeze(0)
        if policy.dim() != 3 or tuple(policy.shape[1:]) != (self.num_infosets, self.max_actions):
            raise ValueError(
                f"policy must have shape [B, {self.num_infosets}, {self.max_actions}] for "
                f"{self.game}, got {tuple(policy.shape)}"
            )
        return policy.to(self.device, self.dtype)


_MEMO: dict[tuple[str, str, torch.dtype], GameTree] = {}


def load_game(
    game: str,
    device: str | torch.device = "auto",
    *,
    cache: bool = True,
    dtype: torch.dtype = torch.float64,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> GameTree:
    """The tensor tree of the OpenSpiel game ``game`` on ``device``.

    Built once (seconds for Leduc, a few minutes for 3-player Leduc), then read
    from the disk cache; within a process the same tree object is reused.
    """
    dev = resolve_device(device)
    key = (_normalise_game_string(game), str(dev), dtype)
    tree = _MEMO.get(key) if cache else None
    if tree is None:
        tree = GameTree(build_arrays(game, cache=cache, max_nodes=max_nodes), dev, dtype)
        if cache:
            _MEMO[key] = tree
    if tree.num_nodes > max_nodes:
        raise GameTreeError(_too_big(game, max_nodes))
    return tree
