"""PSRO's exact meta-game: the factorised contraction against evaluating each joint profile.

PSRO with exact payoffs (as in arXiv 2602.16928) needs the expected utility of
every joint profile of population members: ``(K + 1)^N`` of them after ``K``
iterations. This benchmark runs ``K`` PSRO iterations (uniform meta-solver)
on each game, then fills the whole meta-game of the final populations three
ways, in the same run:

1. ours, :class:`societas.marl.games.psro.MetaGame`: a profile's value is a sum over
   terminal histories of chance reach x each member's own reach x utility, so
   the tensor is a few contractions over the terminals;
2. one tree evaluation per profile on the same tensor tree
   (:func:`societas.marl.games.evaluate.policy_value`, batched over profiles), which is
   how the payoffs are computed without the factorisation;
3. OpenSpiel's C++ ``pyspiel.expected_returns`` per profile (a tree walk per
   joint policy; OpenSpiel's own PSRO estimates entries by sampling instead).

(2) and (3) are timed on a random sample of profiles and extrapolated to the
whole meta-game; the table says how many were timed. Their values are checked
against (1) on the sample (largest absolute difference).

Run: ``python benchmarks/psro_speed.py`` (``--iterations``, ``--games``,
``--sample``). Ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyspiel
import torch
from open_spiel.python import policy as os_policy

from societas.marl.games import load_game
from societas.marl.games.evaluate import policy_value
from societas.marl.games.psro import MetaGame, run_psro

# The training games of arXiv 2602.16928 whose policies OpenSpiel's
# expected_returns takes directly (Goofspiel is simultaneous-move; our tree
# is its turn-based conversion, whose information states differ).
GAMES = ["kuhn_poker(players=3)", "leduc_poker", "liars_dice(dice_sides=5)"]


def _pyspiel_policy(tree, game, pol):
    tab = tree.to_tabular_policy(pol, game)
    return os_policy.python_policy_to_pyspiel_policy(tab)


def bench_game(name: str, iterations: int, sample: int, seed: int) -> dict:
    tree = load_game(name, "cpu")
    game = pyspiel.load_game(name)
    res = run_psro(tree, iterations, "uniform", "uniform", device="cpu", seed=seed)
    pops = res.populations
    sizes = [int(p.shape[0]) for p in pops]
    total = int(np.prod(sizes))

    t = time.perf_counter()
    mg = MetaGame(tree, pops, capacity=max(sizes))
    t_ours = time.perf_counter() - t

    rng = np.random.default_rng(seed)
    k = min(sample, total)
    profiles = np.stack([rng.integers(0, s, size=k) for s in sizes], 1)
    pols = torch.cat([mg.profile_policy(p) for p in profiles], 0)
    t = time.perf_counter()
    vals = policy_value(tree, pols).numpy()
    t_tree = (time.perf_counter() - t) / k * total
    expected = np.stack([mg.payoffs[(slice(None),) + tuple(p)] for p in profiles])
    diff_tree = float(np.abs(vals - expected).max())

    k_os = min(k, max(4, sample // 10))
    converted = [_pyspiel_policy(tree, game, pols[i : i + 1]) for i in range(k_os)]
    root = game.new_initial_state()
    t = time.perf_counter()
    os_vals = [pyspiel.expected_returns(root, converted[i], -1, True) for i in range(k_os)]
    t_os = (time.perf_counter() - t) / k_os * total
    diff_os = float(np.abs(np.asarray(os_vals) - expected[:k_os]).max())
    return {
        "game": name,
        "iterations": iterations,
        "profiles": total,
        "terminals": len(tree.terminals),
        "ours_s": t_ours,
        "tree_per_profile_s": t_tree,
        "openspiel_cpp_s": t_os,
        "sampled_tree": k,
        "sampled_openspiel": k_os,
        "diff_tree": diff_tree,
        "diff_openspiel": diff_os,
        "psro_run_s": res.wall_time,
        "psro_meta_game_s": res.timings["meta_game"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--games", nargs="+", default=GAMES)
    ap.add_argument("--sample", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [bench_game(g, args.iterations, args.sample, args.seed) for g in args.games]
    print(f"\nExact meta-game of {args.iterations} PSRO iterations (uniform), whole tensor, seconds")
    print(
        "| game | profiles | ours | per-profile tree eval (ours) | OpenSpiel C++ expected_returns "
        "| speed-up vs C++ | max diff |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| `{r['game']}` | {r['profiles']:,} | **{r['ours_s']:.3f}** | {r['tree_per_profile_s']:.1f} "
            f"| {r['openspiel_cpp_s']:.1f} | **{r['openspiel_cpp_s'] / r['ours_s']:.0f}x** "
            f"| {max(r['diff_tree'], r['diff_openspiel']):.1e} |"
        )
    print(
        f"(per-profile columns extrapolated from {rows[0]['sampled_tree']} / "
        f"{rows[0]['sampled_openspiel']} sampled profiles)"
    )
    print(
        json.dumps(
            {
                "benchmark": "psro_meta_game",
                "iterations": args.iterations,
                "speedup_vs_openspiel_cpp": {
                    r["game"]: round(r["openspiel_cpp_s"] / r["ours_s"], 1) for r in rows
                },
                "speedup_vs_per_profile_tree": {
                    r["game"]: round(r["tree_per_profile_s"] / r["ours_s"], 1) for r in rows
                },
                "max_abs_diff": max(max(r["diff_tree"], r["diff_openspiel"]) for r in rows),
            }
        )
    )


if __name__ == "__main__":
    main()
